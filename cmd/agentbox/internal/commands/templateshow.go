package commands

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

func templateShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Aliases:   []string{"inspect"},
		Usage:     "describe a template: its image, config, exposed ports and kernel",
		UsageText: "agentbox template show NAME",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			name, err := oneArg(cmd, "a template name")
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			t, err := c.GetTemplate(ctx, name)
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				return printJSON(stdout(cmd), t)
			}
			return printTemplate(stdout(cmd), t)
		},
	}
}

// printTemplate writes one template as "key: value" lines.
func printTemplate(w io.Writer, t client.Template) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	line("name", t.Name)
	line("snapshot", t.SnapshotID)
	line("pool", fmt.Sprintf("%d/%d ready", t.PoolReady, t.PoolSize))
	line("created", t.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
	if im := t.Image; im != nil {
		line("image", im.Ref)
		line("digest", im.Digest)
		line("user", deref(im.User))
		line("working dir", deref(im.WorkingDir))
		if im.Entrypoint != nil {
			line("entrypoint", quoteArgv(*im.Entrypoint))
		}
		if im.Cmd != nil {
			line("cmd", quoteArgv(*im.Cmd))
		}
		if im.Env != nil {
			for _, k := range slices.Sorted(maps.Keys(*im.Env)) {
				line("env", k+"="+(*im.Env)[k])
			}
		}
	}
	line("ports", templatePorts(t))
	line("kernel", templateKernel(t))
	if k := t.Kernel; k != nil && k.Source == client.TemplateKernelSourceTemplate {
		line("kernel digest", k.Digest)
		line("modules dir", k.ModulesDir)
		if len(k.Modules) > 0 {
			line("modules", strings.Join(k.Modules, " "))
		}
	}
	return tw.Flush()
}

// templatePorts is a template's image's exposed ports, "-" for none.
func templatePorts(t client.Template) string {
	if t.Image == nil || t.Image.ExposedPorts == nil || len(*t.Image.ExposedPorts) == 0 {
		return "-"
	}
	return strings.Join(*t.Image.ExposedPorts, ",")
}

// templateKernel is "default" or the template's own kernel file.
func templateKernel(t client.Template) string {
	k := t.Kernel
	if k == nil || k.Source != client.TemplateKernelSourceTemplate {
		return "default"
	}
	s := k.Path
	if len(k.Modules) > 0 {
		s += fmt.Sprintf(" (+%d modules)", len(k.Modules))
	}
	return s
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
