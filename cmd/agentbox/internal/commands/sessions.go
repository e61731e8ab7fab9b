package commands

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// sessionCommands are the commands of exec sessions and service URLs.
func sessionCommands() []*cli.Command {
	return []*cli.Command{attachCommand(), psCommand(), urlCommand()}
}

// sessionFlags are exec's flags for durable and interactive sessions.
func sessionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "background", Aliases: []string{"d"}, Usage: "start the command, print its exec id and return (see attach, ps)"},
		&cli.BoolFlag{Name: "interactive", Aliases: []string{"i"}, Usage: "send this terminal's stdin to the command as it is typed"},
		&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "run the command on a terminal (raw mode here, window size followed)"},
	}
}

// runBackground starts req and prints its exec id.
func runBackground(ctx context.Context, cmd *cli.Command, c *client.Client, id string, req client.ExecRequest) error {
	execID, err := c.ExecBackground(ctx, id, req)
	if err != nil {
		return err
	}
	return printResult(cmd, client.ExecStarted{ExecID: execID}, execID)
}

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "re-attach to an exec session and stream its output from an offset; exits with its exit code",
		UsageText: "agentbox attach [--offset N] [-i] [-t] ID EXEC_ID",
		Flags: append([]cli.Flag{
			&cli.Int64Flag{Name: "offset", Usage: "byte position in the session's output to start from"},
		}, sessionFlags()[1:]...),
		UseShortOptionHandling: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args := cmd.Args().Slice()
			if len(args) != 2 {
				return errors.New("attach: give a sandbox id and an exec id")
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if cmd.Bool("interactive") || cmd.Bool("tty") {
				return interact(ctx, cmd, c, args[0], args[1], cmd.Int64("offset"))
			}
			return attach(ctx, cmd, c, args[0], args[1], cmd.Int64("offset"))
		},
	}
}

func attach(ctx context.Context, cmd *cli.Command, c *client.Client, id, execID string, offset int64) error {
	return printOutput(cmd, func(emit func(client.Event) error) error { return c.Attach(ctx, id, execID, offset, emit) })
}

func psCommand() *cli.Command {
	return &cli.Command{
		Name:      "ps",
		Usage:     "list a sandbox's exec sessions (running and exited)",
		UsageText: "agentbox ps [--json] ID",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return errors.New("ps: give a sandbox id")
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListExecs(ctx, cmd.Args().First())
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				return printJSON(stdout(cmd), list)
			}
			tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "EXEC ID\tSTATUS\tPID\tSTARTED\tCOMMAND")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.ExecID, sessionStatus(s), s.PID,
					s.StartedAt.Local().Format(time.DateTime), strings.Join(s.Cmd, " "))
			}
			return tw.Flush()
		},
	}
}

func sessionStatus(s client.ExecSession) string {
	switch {
	case s.Running && s.Tty:
		return "running (tty)"
	case s.Running:
		return "running"
	case s.Signal != "":
		return "killed (" + s.Signal + ")"
	case s.ExitCode != nil:
		return "exited " + strconv.Itoa(*s.ExitCode)
	}
	return "exited"
}

func urlCommand() *cli.Command {
	return &cli.Command{
		Name:  "url",
		Usage: "print the service URL of a TCP port in a sandbox (opens in a browser)",
		UsageText: "agentbox url [--share 1h] [--public | --private] [--path] ID PORT\n\n" +
			"Without --share the URL carries the sandbox's access token; with --share, a signed link\n" +
			"that expires; --public makes the port open to anyone with the URL.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "share", Usage: "print a share link that expires after this long (e.g. 1h)"},
			&cli.BoolFlag{Name: "public", Usage: "make the port's URLs public (no credential needed)"},
			&cli.BoolFlag{Name: "private", Usage: "make a public port private again"},
			&cli.BoolFlag{Name: "path", Usage: "print the path-based URL even when hostd has a domain"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args := cmd.Args().Slice()
			if len(args) != 2 {
				return errors.New("url: give a sandbox id and a port")
			}
			port, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("url: port %q: %w", args[1], err)
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			return printURL(ctx, cmd, c, args[0], port)
		},
	}
}

func printURL(ctx context.Context, cmd *cli.Command, c *client.Client, id string, port int) error {
	var (
		pa  client.PortAccess
		err error
	)
	switch {
	case cmd.Bool("public") && cmd.Bool("private"):
		return errors.New("url: --public and --private contradict each other")
	case cmd.Bool("public") || cmd.Bool("private"):
		pa, err = c.SetPortPublic(ctx, id, port, cmd.Bool("public"))
	default:
		pa, err = c.PortAccess(ctx, id, port)
	}
	if err != nil {
		return err
	}
	pick := func(host, path string) string {
		if host != "" && !cmd.Bool("path") {
			return host
		}
		return path
	}
	if ttl := cmd.Duration("share"); ttl != 0 {
		if ttl < time.Second {
			return fmt.Errorf("url: --share %v is too short", ttl)
		}
		l, err := c.ShareLink(ctx, id, port, ttl)
		if err != nil {
			return err
		}
		return printResult(cmd, l, pick(l.URL, l.PathURL))
	}
	if cmd.Bool("json") {
		return printJSON(stdout(cmd), pa)
	}
	u := pick(pa.URL, pa.PathURL)
	if !pa.Public {
		u += "?token=" + pa.Token
	}
	_, err = fmt.Fprintln(stdout(cmd), u)
	return err
}
