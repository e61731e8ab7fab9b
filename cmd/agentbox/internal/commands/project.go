package commands

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

func projectCommand() *cli.Command {
	return &cli.Command{
		Name:  "project",
		Usage: "manage projects (admin): each owns its keys, sandboxes, snapshots, templates and secrets",
		Commands: []*cli.Command{
			{
				Name: "create", Usage: "create projects", UsageText: "agentbox project create NAME...",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.Args().Len() == 0 {
						return &UsageError{Err: errors.New("give at least one project name")}
					}
					c, err := newClient(cmd)
					if err != nil {
						return err
					}
					for _, name := range cmd.Args().Slice() {
						p, err := c.CreateProject(ctx, name)
						if err != nil {
							return err
						}
						fmt.Fprintln(stdout(cmd), p.Name)
					}
					return nil
				},
			},
			{
				Name: "ls", Usage: "list the projects",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := newClient(cmd)
					if err != nil {
						return err
					}
					list, err := c.ListProjects(ctx)
					if err != nil {
						return err
					}
					if cmd.Bool("json") {
						return printJSON(stdout(cmd), client.ProjectList{Projects: list})
					}
					tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tCREATED")
					for _, p := range list {
						fmt.Fprintf(tw, "%s\t%s\n", p.Name, p.CreatedAt.Format("2006-01-02 15:04:05"))
					}
					return tw.Flush()
				},
			},
		},
	}
}
