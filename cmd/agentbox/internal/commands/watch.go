package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

func watchCommand() *cli.Command {
	return &cli.Command{
		Name:      "watch",
		Usage:     "print changes that processes in a sandbox make under a directory, until interrupted",
		UsageText: "agentbox watch [-r] [--json] ID /DIR",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}, Usage: "include subdirectories"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 2 {
				return &UsageError{Err: errors.New("watch: give a sandbox id and a directory")}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			out := stdout(cmd)
			enc := json.NewEncoder(out)
			return c.Watch(ctx, cmd.Args().Get(0), cmd.Args().Get(1), cmd.Bool("recursive"), func(ev client.WatchEvent) error {
				if cmd.Bool("json") {
					return enc.Encode(ev)
				}
				line := fmt.Sprintf("%s %-6s %s", ev.Time.Local().Format(time.TimeOnly+".000"), ev.Type, ev.Path)
				if ev.OldPath != "" {
					line += " (from " + ev.OldPath + ")"
				}
				if ev.IsDir {
					line += "/"
				}
				_, err := fmt.Fprintln(out, line)
				return err
			})
		},
	}
}
