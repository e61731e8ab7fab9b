package commands

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

func diffCommand() *cli.Command {
	return &cli.Command{
		Name:  "diff",
		Usage: "what sandbox or snapshot A has that B has not (like git diff --stat; -p for the patch)",
		UsageText: "agentbox diff [-p] [--json] [--method auto|journal|walk|full] A B [PATH]\n" +
			"   A and B are sandbox (sb-…) or snapshot (sn-…) ids; B is the old side",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "patch", Aliases: []string{"p"}, Usage: "print the unified diff of text files"},
			&cli.StringFlag{Name: "method", Usage: "auto, journal, walk or full (see the API)"},
			&cli.StringSliceFlag{Name: "exclude", Usage: "leave out a path (repeatable; replaces /proc /sys /dev /run /tmp)"},
			&cli.BoolFlag{Name: "events", Usage: "also show the two flight-recorder logs since the fork, side by side"},
			&cli.IntFlag{Name: "max-patch-bytes", Usage: "no patch for files larger than this (default 256 KiB)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args := cmd.Args().Slice()
			if len(args) < 2 || len(args) > 3 {
				return fmt.Errorf("diff: give A, B and optionally a PATH")
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			o := client.DiffOptions{Patch: cmd.Bool("patch"), Method: cmd.String("method"), Excludes: cmd.StringSlice("exclude"),
				Events: cmd.Bool("events"), MaxPatchBytes: int64(cmd.Int("max-patch-bytes"))}
			if len(args) == 3 {
				o.Path = args[2]
			}
			if cmd.Bool("json") {
				var pages []client.Diff
				err := c.DiffAll(ctx, args[0], args[1], o, func(d client.Diff) error { pages = append(pages, d); return nil })
				if err != nil {
					return err
				}
				if len(pages) == 1 {
					return printJSON(stdout(cmd), pages[0])
				}
				return printJSON(stdout(cmd), pages)
			}
			return printDiff(ctx, stdout(cmd), c, args[0], args[1], o)
		},
	}
}

// printDiff prints every page as git diff --stat does, then the patches.
func printDiff(ctx context.Context, w io.Writer, c *client.Client, a, b string, o client.DiffOptions) error {
	files, adds, dels := 0, 0, 0
	var patches []string
	first := true
	err := c.DiffAll(ctx, a, b, o, func(d client.Diff) error {
		if first {
			fmt.Fprintf(w, "diff %s (%s) against %s (%s), base %s, method %s\n", d.New.ID, d.New.Source, d.Old.ID, d.Old.Source, orNone(d.BaseSnapshot), d.Method)
			first = false
		}
		for _, e := range d.Entries {
			files++
			adds += e.Additions
			dels += e.Deletions
			fmt.Fprintf(w, " %s\n", statLine(e))
			if e.Patch != "" {
				patches = append(patches, e.Patch)
			}
		}
		if d.Events != nil {
			printEventsDiff(w, d.Events)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, " %d paths changed, %d insertions(+), %d deletions(-)\n", files, adds, dels)
	for _, p := range patches {
		fmt.Fprint(w, p)
		if !strings.HasSuffix(p, "\n") {
			fmt.Fprintln(w)
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// statLine is one entry: its status, path and what changed.
func statLine(e client.DiffEntry) string {
	mark := map[client.DiffEntryStatus]string{"added": "A", "removed": "D", "modified": "M", "renamed": "R"}[e.Status]
	p := e.Path
	if e.Kind == client.DiffEntryKindDir {
		p += "/"
	}
	if e.Status == client.DiffEntryStatusRenamed {
		p = e.OldPath + " => " + e.Path
	}
	var what []string
	switch {
	case e.Additions+e.Deletions > 0:
		what = append(what, fmt.Sprintf("%d %s%s", e.Additions+e.Deletions, strings.Repeat("+", min(e.Additions, 30)), strings.Repeat("-", min(e.Deletions, 30))))
	case e.Binary:
		what = append(what, fmt.Sprintf("Bin %d -> %d bytes", size(e.Old), size(e.New)))
	case e.PatchOmitted == client.DiffEntryPatchOmittedTooLarge:
		what = append(what, fmt.Sprintf("%d -> %d bytes (over the patch cap)", size(e.Old), size(e.New)))
	case slices.Contains(e.Changes, client.DiffEntryChangesContent) || e.Status == client.DiffEntryStatusAdded || e.Status == client.DiffEntryStatusRemoved:
		what = append(what, fmt.Sprintf("%d -> %d bytes", size(e.Old), size(e.New)))
	}
	for _, c := range e.Changes {
		switch c {
		case client.DiffEntryChangesMode:
			what = append(what, fmt.Sprintf("mode %04o -> %04o", e.Old.Mode, e.New.Mode))
		case client.DiffEntryChangesOwner:
			what = append(what, fmt.Sprintf("owner %d:%d -> %d:%d", e.Old.UID, e.Old.GID, e.New.UID, e.New.GID))
		case client.DiffEntryChangesTarget:
			what = append(what, fmt.Sprintf("-> %s (was %s)", e.New.LinkTarget, e.Old.LinkTarget))
		case client.DiffEntryChangesType:
			what = append(what, fmt.Sprintf("%s -> %s", e.Old.Type, e.New.Type))
		}
	}
	if e.Kind == client.DiffEntryKindSymlink && e.Status == client.DiffEntryStatusAdded {
		what = append(what, "-> "+e.New.LinkTarget)
	}
	return fmt.Sprintf("%s %-50s | %s", mark, p, strings.Join(what, ", "))
}

func size(s *client.DiffStat) int64 {
	if s == nil {
		return 0
	}
	return s.Size
}

// printEventsDiff prints the common prefix once, then each side's events.
func printEventsDiff(w io.Writer, ev *client.DiffEvents) {
	fmt.Fprintf(w, "events: %d in common\n", len(ev.Common))
	for _, e := range ev.Common {
		fmt.Fprintf(w, "  = %s\n", diffEventLine(e))
	}
	for _, side := range []struct {
		mark string
		evs  []client.AuditEvent
	}{{"+", ev.New}, {"-", ev.Old}} {
		for _, e := range side.evs {
			fmt.Fprintf(w, "  %s %s\n", side.mark, diffEventLine(e))
		}
	}
}

// diffEventLine is one event in a few words.
func diffEventLine(e client.AuditEvent) string {
	return e.Time.Format(time.TimeOnly) + " " + string(e.Type) + " " + eventWhat(e)
}

func lineageCommand() *cli.Command {
	return &cli.Command{
		Name:      "lineage",
		Usage:     "the tree of snapshots and forks a sandbox belongs to",
		UsageText: "agentbox lineage [--json] ID",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := oneArg(cmd, "a sandbox id")
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			l, err := c.Lineage(ctx, id)
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				return printJSON(stdout(cmd), l)
			}
			printLineage(stdout(cmd), l.Root, "", "", id)
			return nil
		},
	}
}

// printLineage prints n and its children as a tree.
func printLineage(w io.Writer, n client.LineageNode, first, rest, focus string) {
	label := n.ID
	if n.Kind == client.LineageNodeKindSnapshot {
		label += fmt.Sprintf(" (%s of %s)", n.SnapshotKind, n.SandboxID)
	} else {
		label += " " + n.State
	}
	if n.ID == focus {
		label += " *"
	}
	label += "  " + n.CreatedAt.Local().Format(time.DateTime)
	if lc := n.LastCommand; lc != nil {
		code := "?"
		if lc.ExitCode != nil {
			code = fmt.Sprint(*lc.ExitCode)
		}
		argv := strings.Join(lc.Argv, " ")
		if r := []rune(argv); len(r) > 60 {
			argv = string(r[:57]) + "..."
		}
		label += fmt.Sprintf("  $ %s -> exit %s", argv, code)
	}
	fmt.Fprintln(w, first+label)
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			printLineage(w, c, rest+"└── ", rest+"    ", focus)
		} else {
			printLineage(w, c, rest+"├── ", rest+"│   ", focus)
		}
	}
}

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "restore a snapshot N times, run a command in each, and say which outcomes differ",
		UsageText: "agentbox replay [-n N] SNAPSHOT -- CMD [ARG...]",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Value: 3, Usage: "how many restores"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args := cmd.Args().Slice()
			if len(args) < 2 {
				return fmt.Errorf("replay: give a snapshot id and a command")
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			w := stdout(cmd)
			res, err := c.Replay(ctx, args[0], client.ReplayRequest{Cmd: args[1:], N: cmd.Int("count")}, func(ev client.ReplayEvent) {
				if ev.Run != nil && ev.Type == client.ReplayEventTypeFinished && !cmd.Bool("json") {
					fmt.Fprintf(cmd.Root().ErrWriter, "run %d (%s): exit %d %s\n", ev.Run.Index, ev.Run.SandboxID, ev.Run.ExitCode, ev.Run.Error)
				}
			})
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				return printJSON(w, res)
			}
			for _, r := range res.Runs {
				fmt.Fprintf(w, "run %d: exit %d, outcome %d, %d ms\n", r.Index, r.ExitCode, r.Group, r.DurationMs)
			}
			fmt.Fprintf(w, "%d runs, %d distinct outcomes, differ: %v\n", len(res.Runs), res.Groups, res.Differ)
			return nil
		},
	}
}
