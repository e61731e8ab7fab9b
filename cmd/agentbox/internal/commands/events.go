package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

func eventsCommand() *cli.Command {
	return &cli.Command{
		Name:      "events",
		Usage:     "print a sandbox's flight recorder (what ran, files, packages, network, lifecycle, API calls)",
		UsageText: "agentbox events ID [--type exec,file,...] [--after N] [--follow] [--jsonl | --json]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "type", Usage: "only these `TYPES` (comma separated: exec, file, package, network, lifecycle, api, recorder)"},
			&cli.Int64Flag{Name: "after", Usage: "only events with an id above `N`"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events until the sandbox is deleted"},
			&cli.BoolFlag{Name: "jsonl", Usage: "export every matching event as JSON Lines"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			c, id, err := clientAndID(cmd)
			if err != nil {
				return err
			}
			q := client.EventQuery{After: cmd.Int64("after")}
			if t := cmd.String("type"); t != "" {
				for _, s := range strings.Split(t, ",") {
					q.Types = append(q.Types, client.AuditEventType(strings.TrimSpace(s)))
				}
			}
			out := stdout(cmd)
			switch {
			case cmd.Bool("jsonl"):
				return c.ExportEvents(ctx, id, q, out)
			case cmd.Bool("follow"):
				enc := json.NewEncoder(out)
				return c.FollowEvents(ctx, id, q, func(e client.AuditEvent) error {
					if cmd.Bool("json") {
						return enc.Encode(e)
					}
					_, err := fmt.Fprintln(out, eventLine(e))
					return err
				})
			}
			list, err := c.Events(ctx, id, q)
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				return printJSON(out, list)
			}
			return printEvents(out, list.Events)
		},
	}
}

func printEvents(w io.Writer, evs []client.AuditEvent) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tTYPE\tTRACE\tWHAT")
	for _, e := range evs {
		fmt.Fprintln(tw, eventLine(e))
	}
	return tw.Flush()
}

// eventLine is one event as a tab-separated line.
func eventLine(e client.AuditEvent) string {
	trace := ""
	if e.TraceID != nil {
		trace = (*e.TraceID)[:8]
	}
	return fmt.Sprintf("%d\t%s\t%s\t%s\t%s", e.ID, e.Time.Format("15:04:05.000"), e.Type, trace, eventWhat(e))
}

// eventWhat summarizes an event's details.
func eventWhat(e client.AuditEvent) string {
	switch {
	case e.Exec != nil:
		x := e.Exec
		s := fmt.Sprintf("%s %s %s", x.Phase, x.ExecID, strings.Join(deref(x.Argv), " "))
		if x.ExitCode != nil {
			s += fmt.Sprintf(" → exit %d", *x.ExitCode)
		}
		return s
	case e.File != nil:
		return fmt.Sprintf("%s %s (%d bytes, %s)", e.File.Op, e.File.Path, e.File.Size, e.File.Source)
	case e.Package != nil:
		return fmt.Sprintf("%s %s %s %s", e.Package.Manager, e.Package.Action, e.Package.Name, e.Package.Version)
	case e.Network != nil:
		n := e.Network
		verdict := "denied"
		if n.Allowed {
			verdict = "allowed"
		}
		return fmt.Sprintf("%s %s:%d %s %s (%s)", n.Kind, n.Host, n.Port, strings.TrimSpace(deref(n.Method)+" "+deref(n.Path)), verdict, n.Rule)
	case e.Lifecycle != nil:
		l := e.Lifecycle
		return strings.TrimSpace(fmt.Sprintf("%s %s %s", l.Action, deref(l.State), deref(l.Reason)))
	case e.API != nil:
		return fmt.Sprintf("%s %s → %d", e.API.Method, e.API.Path, e.API.Status)
	case e.Recorder != nil:
		return fmt.Sprintf("lost %d %s", deref(e.Recorder.Lost), deref(e.Recorder.WatchError))
	}
	return ""
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
