package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

func secretCommand() *cli.Command {
	return &cli.Command{
		Name:  "secret",
		Usage: "manage the secrets the egress proxy injects (values are never shown)",
		Commands: []*cli.Command{
			{
				Name: "set", Usage: "store a secret, read from stdin (or --value)",
				UsageText: "agentbox secret set NAME < value   |   agentbox secret set NAME --value V",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "value", Usage: "the value (visible in your shell history and ps; prefer stdin)"}},
				Action:    secretSet,
			},
			{
				Name: "ls", Usage: "list the secrets' names",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := newClient(cmd)
					if err != nil {
						return err
					}
					list, err := c.ListSecrets(ctx)
					if err != nil {
						return err
					}
					if cmd.Bool("json") {
						return printJSON(stdout(cmd), client.SecretList{Secrets: list})
					}
					tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tCREATED")
					for _, s := range list {
						fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.CreatedAt.Format("2006-01-02 15:04:05"))
					}
					return tw.Flush()
				},
			},
			{
				Name: "rm", Usage: "delete secrets", UsageText: "agentbox secret rm NAME...",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.Args().Len() == 0 {
						return &UsageError{Err: errors.New("give at least one secret name")}
					}
					c, err := newClient(cmd)
					if err != nil {
						return err
					}
					for _, name := range cmd.Args().Slice() {
						if err := c.DeleteSecret(ctx, name); err != nil {
							return err
						}
						fmt.Fprintln(stdout(cmd), name)
					}
					return nil
				},
			},
		},
	}
}

func secretSet(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() != 1 {
		return &UsageError{Err: errors.New("give one secret name")}
	}
	value := cmd.String("value")
	if !cmd.IsSet("value") {
		b, err := io.ReadAll(io.LimitReader(stdin(cmd), 64<<10+1))
		if err != nil {
			return err
		}
		value = strings.TrimRight(string(b), "\r\n")
	}
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	s, err := c.CreateSecret(ctx, cmd.Args().First(), value)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout(cmd), s.Name)
	return err
}
