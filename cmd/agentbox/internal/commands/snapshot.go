package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// noun returns a command whose subcommands share the root's error
// handling (Root only sets it on its direct children).
func noun(c *cli.Command) *cli.Command {
	for _, sub := range c.Commands {
		sub.DisableSliceFlagSeparator = true
		sub.OnUsageError = usageError
	}
	return c
}

func snapshotCommand() *cli.Command {
	return noun(&cli.Command{
		Name:  "snapshot",
		Usage: "capture, list, inspect and delete snapshots",
		Commands: []*cli.Command{
			snapshotCreateCommand(), snapshotLsCommand(), snapshotRmCommand(), snapshotShowCommand(),
		},
	})
}

func snapshotCreateCommand() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "snapshot a running sandbox and print the snapshot's id",
		UsageText: "agentbox snapshot create [--stay-paused] ID",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "stay-paused", Usage: "leave the sandbox paused after the capture"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := oneArg(cmd, "a sandbox id")
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			sn, err := c.Snapshot(ctx, id, client.SnapshotRequest{StayPaused: cmd.Bool("stay-paused")})
			if err != nil {
				return err
			}
			return printResult(cmd, sn, sn.ID)
		},
	}
}

func snapshotLsCommand() *cli.Command {
	return &cli.Command{
		Name:    "ls",
		Aliases: []string{"list"},
		Usage:   "list snapshots, oldest first",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only ids"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListSnapshots(ctx)
			if err != nil {
				return err
			}
			switch {
			case cmd.Bool("json"):
				return printJSON(stdout(cmd), client.SnapshotList{Snapshots: list})
			case cmd.Bool("quiet"):
				for _, sn := range list {
					fmt.Fprintln(stdout(cmd), sn.ID)
				}
				return nil
			}
			return printSnapshots(stdout(cmd), list, time.Now())
		},
	}
}

func printSnapshots(w io.Writer, list []client.Snapshot, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tSANDBOX\tPARENT\tSIZE\tAGE\tUSED BY")
	for _, sn := range list {
		age := now.Sub(sn.CreatedAt).Truncate(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sn.ID, sn.Kind, dash(sn.SandboxID), dash(sn.ParentID),
			humanSize(sn.SizeBytes), age, dash(strings.Join(sn.UsedBy, ", ")))
	}
	return tw.Flush()
}

func snapshotRmCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "delete snapshots that nothing uses",
		UsageText: "agentbox snapshot rm SNAP...",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			return forEach(ctx, cmd, "snapshot id", func(c *client.Client, id string) error {
				return c.DeleteSnapshot(ctx, id)
			})
		},
	}
}

// forEach calls fn for each argument (at least one), printing those that
// succeed to stdout and the failures to stderr; any failure exits 1.
func forEach(ctx context.Context, cmd *cli.Command, what string, fn func(c *client.Client, arg string) error) error {
	args := cmd.Args().Slice()
	if len(args) == 0 {
		return fmt.Errorf("%s: give at least one %s", cmd.Name, what)
	}
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	failed := false
	for _, arg := range args {
		if err := fn(c, arg); err != nil {
			fmt.Fprintf(stderr(cmd), "agentbox: %s %s: %v\n", cmd.Name, arg, err)
			failed = true
			continue
		}
		fmt.Fprintln(stdout(cmd), arg)
	}
	if failed {
		return &ExitError{Code: 1}
	}
	return nil
}

// maxLineage bounds the walk up a snapshot's parents.
const maxLineage = 64

// snapshotDetail is `snapshot show --json`: the snapshot and its
// ancestors, nearest first.
type snapshotDetail struct {
	client.Snapshot
	Ancestors []string `json:"ancestors"`
}

func snapshotShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "describe a snapshot and its lineage (parents, and what uses it)",
		UsageText: "agentbox snapshot show SNAP",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := oneArg(cmd, "a snapshot id")
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			sn, err := c.GetSnapshot(ctx, id)
			if err != nil {
				return err
			}
			d := snapshotDetail{Snapshot: sn, Ancestors: []string{}}
			for p := sn.ParentID; p != "" && len(d.Ancestors) < maxLineage; {
				d.Ancestors = append(d.Ancestors, p)
				parent, err := c.GetSnapshot(ctx, p)
				if err != nil {
					fmt.Fprintf(stderr(cmd), "agentbox: snapshot %s: %v\n", p, err)
					break
				}
				p = parent.ParentID
			}
			if cmd.Bool("json") {
				return printJSON(stdout(cmd), d)
			}
			return printSnapshot(stdout(cmd), d)
		},
	}
}

func printSnapshot(w io.Writer, d snapshotDetail) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rows := [][2]string{
		{"id", d.ID},
		{"kind", d.Kind},
		{"sandbox", dash(d.SandboxID)},
		{"parent", dash(d.ParentID)},
		{"lineage", lineage(d)},
		{"used by", dash(strings.Join(d.UsedBy, ", "))},
		{"vcpus", fmt.Sprint(d.VCPUs)},
		{"memory", fmt.Sprintf("%dMiB", d.MemoryMiB)},
		{"size", humanSize(d.SizeBytes)},
		{"cache key", dash(d.CacheKey)},
		{"created", d.CreatedAt.Format(time.RFC3339)},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// lineage is "base > sn1 > sn2 > THIS", oldest first.
func lineage(d snapshotDetail) string {
	parts := []string{"base"}
	for i := len(d.Ancestors) - 1; i >= 0; i-- {
		parts = append(parts, d.Ancestors[i])
	}
	return strings.Join(append(parts, d.ID), " > ")
}

func forkCommand() *cli.Command {
	return &cli.Command{
		Name:      "fork",
		Usage:     "start copy-on-write copies of a running sandbox and print their ids",
		UsageText: "agentbox fork [-n N] ID",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Value: 1, Usage: "how many copies"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := oneArg(cmd, "a sandbox id")
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			forks, err := c.Fork(ctx, id, cmd.Int("count"))
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				return printJSON(stdout(cmd), client.SandboxList{Sandboxes: forks})
			}
			for _, sb := range forks {
				fmt.Fprintln(stdout(cmd), sb.ID)
			}
			return nil
		},
	}
}

func pauseCommand() *cli.Command {
	return stateCommand("pause", "write a sandbox's memory to disk and stop its VM", (*client.Client).Pause)
}

func resumeCommand() *cli.Command {
	return stateCommand("resume", "bring a paused sandbox back", (*client.Client).Resume)
}

// stateCommand is pause or resume: call fn on one sandbox, print its id.
func stateCommand(name, usage string, fn func(*client.Client, context.Context, string) (client.Sandbox, error)) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		UsageText: "agentbox " + name + " ID",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := oneArg(cmd, "a sandbox id")
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			sb, err := fn(c, ctx, id)
			if err != nil {
				return err
			}
			return printResult(cmd, sb, sb.ID)
		},
	}
}

// startFlags choose what create starts a sandbox from.
func startFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "snapshot", Usage: "start from this snapshot (its vcpus and memory win)"},
		&cli.StringFlag{Name: "template", Usage: "start from this template (a warm sandbox when one is ready)"},
	}
}

// setStart applies startFlags to req.
func setStart(cmd *cli.Command, req *client.CreateSandboxRequest) error {
	req.Snapshot, req.Template = cmd.String("snapshot"), cmd.String("template")
	if req.Snapshot != "" && req.Template != "" {
		return errors.New("create: give --snapshot or --template, not both")
	}
	return nil
}

// oneArg returns the command's only argument.
func oneArg(cmd *cli.Command, what string) (string, error) {
	if cmd.Args().Len() != 1 {
		return "", fmt.Errorf("%s: give %s", cmd.Name, what)
	}
	return cmd.Args().First(), nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanSize formats n bytes as "512B", "1.5KiB", "12.0MiB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
