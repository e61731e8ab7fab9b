package commands

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/blueprint"
)

func templateCommand() *cli.Command {
	return noun(&cli.Command{
		Name:     "template",
		Usage:    "build, list and delete templates (named snapshots with a warm pool)",
		Commands: []*cli.Command{templateBuildCommand(), templateLsCommand(), templateShowCommand(), templateRmCommand()},
	})
}

func templateBuildCommand() *cli.Command {
	return &cli.Command{
		Name:  "build",
		Usage: "build a template from a blueprint, reusing cached steps; progress goes to stderr, the name to stdout",
		UsageText: "agentbox template build [-f blueprint.yaml] [--pool N] [--no-cache] NAME\n" +
			"agentbox template build -f Dockerfile [--build-arg K=V]... [--pool N] [--no-cache] NAME [CONTEXT]\n" +
			"agentbox template build --image REF [--pool N] [--insecure-registry] [--registry-secret S] NAME\n" +
			"agentbox template build [--pool N] READY   (python-data, browser, docker: images/templates/READY, layout and template in one step)\n\n" +
			"A blueprint is YAML: `base: debian-bookworm` (or `template: NAME`), optional vcpus and\n" +
			"memory_mib, and steps, each one of `run: CMD`, `copy: {src: LOCAL, dest: /PATH}`,\n" +
			"`env: {K: V}` or `workdir: /PATH`. Copy sources are relative to the blueprint file.\n\n" +
			"-f names a Dockerfile when its name is Dockerfile, Containerfile, Dockerfile.* or *.Dockerfile,\n" +
			"or when a CONTEXT is given (default: the Dockerfile's directory). FROM template:NAME or the name\n" +
			"of an existing template starts from that template, FROM base:debian-bookworm from the base,\n" +
			"anything else is an image (built once into a template image-HASH, then reused).",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Value: "blueprint.yaml", Usage: "the blueprint"},
			&cli.IntFlag{Name: "pool", Usage: "warm sandboxes to keep ready"},
			&cli.BoolFlag{Name: "no-cache", Usage: "run every step, even those with a cached snapshot"},
			&cli.StringSliceFlag{Name: "build-arg", Usage: "a Dockerfile ARG's value, `K=V` (repeatable)"},
		}, imageFlags()...),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			file := cmd.String("file")
			if isDockerfile(file) || cmd.Args().Len() == 2 {
				return buildDockerfile(ctx, cmd, file)
			}
			name, err := oneArg(cmd, "the template's name")
			if err != nil {
				return err
			}
			if cmd.Int("pool") < 0 {
				return fmt.Errorf("build: --pool %d is negative", cmd.Int("pool"))
			}
			if cmd.String("image") != "" {
				c, err := newClient(cmd)
				if err != nil {
					return err
				}
				t, err := buildFromImage(ctx, cmd, c, name)
				if err != nil {
					return err
				}
				return printResult(cmd, t, t.Name)
			}
			if !cmd.IsSet("file") && !fileExists(file) {
				if root := readyTemplateDir(name); root != "" {
					t, err := buildReadyTemplate(ctx, cmd, root, name)
					if err != nil {
						return err
					}
					return printResult(cmd, t, t.Name)
				}
			}
			if cmd.String("kernel") != "" || cmd.String("modules") != "" {
				return fmt.Errorf("%s: --kernel and --modules need --image (or a Dockerfile FROM an image)", cmd.Name)
			}
			bp, err := blueprint.ParseFile(file)
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			t, err := blueprint.Build(ctx, c, name, bp, blueprint.BuildOptions{
				Out: stderr(cmd), Err: stderr(cmd),
				Pool: cmd.Int("pool"), NoCache: cmd.Bool("no-cache"), BaseDir: filepath.Dir(file),
			})
			if err != nil {
				return err
			}
			return printResult(cmd, t, t.Name)
		},
	}
}

func templateLsCommand() *cli.Command {
	return &cli.Command{
		Name:    "ls",
		Aliases: []string{"list"},
		Usage:   "list templates",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only names"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListTemplates(ctx)
			if err != nil {
				return err
			}
			switch {
			case cmd.Bool("json"):
				return printJSON(stdout(cmd), client.TemplateList{Templates: list})
			case cmd.Bool("quiet"):
				for _, t := range list {
					fmt.Fprintln(stdout(cmd), t.Name)
				}
				return nil
			}
			return printTemplates(stdout(cmd), list, time.Now())
		},
	}
}

func printTemplates(w io.Writer, list []client.Template, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSNAPSHOT\tPOOL\tAGE\tIMAGE\tPORTS\tKERNEL")
	for _, t := range list {
		age := now.Sub(t.CreatedAt).Truncate(time.Second)
		img := "-"
		if t.Image != nil {
			img = t.Image.Ref
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", t.Name, t.SnapshotID, t.PoolReady, t.PoolSize, age,
			img, templatePorts(t), templateKernel(t))
	}
	return tw.Flush()
}

func templateRmCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "delete templates and their warm pools",
		UsageText: "agentbox template rm NAME...",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			return forEach(ctx, cmd, "template name", func(c *client.Client, name string) error {
				return c.DeleteTemplate(ctx, name)
			})
		},
	}
}
