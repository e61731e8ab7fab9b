package commands

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

func keyCommand() *cli.Command {
	return &cli.Command{
		Name:  "key",
		Usage: "manage API keys (admin): secrets are shown once, at create and rotate",
		Commands: []*cli.Command{
			{
				Name: "create", Usage: "make a key and print its secret (once)",
				UsageText: "agentbox key create [--project P] [--role member|admin] [--expires 24h] [NAME]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "project", Usage: "the key's project (default: yours)"},
					&cli.StringFlag{Name: "role", Value: "member", Usage: "member (works in its project) or admin"},
					&cli.DurationFlag{Name: "expires", Usage: "the key expires after this long (default: never)"},
				},
				Action: keyCreate,
			},
			{
				Name: "ls", Usage: "list the live keys (never their secrets)",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "project", Usage: `another project's keys (admin; "*": every project's)`}},
				Action: keyList,
			},
			{
				Name: "revoke", Usage: "revoke keys by id: refused from their next call, their streams closed",
				UsageText: "agentbox key revoke KEY_ID...",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.Args().Len() == 0 {
						return &UsageError{Err: errors.New("give at least one key id")}
					}
					c, err := newClient(cmd)
					if err != nil {
						return err
					}
					for _, id := range cmd.Args().Slice() {
						if err := c.RevokeKey(ctx, id); err != nil {
							return err
						}
						fmt.Fprintln(stdout(cmd), id)
					}
					return nil
				},
			},
			{
				Name: "rotate", Usage: "make a new bootstrap key (hostd writes it to its key file) and revoke the previous one",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := newClient(cmd)
					if err != nil {
						return err
					}
					k, err := c.RotateKey(ctx)
					if err != nil {
						return err
					}
					return printKey(cmd, k)
				},
			},
		},
	}
}

func keyCreate(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 1 {
		return &UsageError{Err: errors.New("give at most one key name")}
	}
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	k, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: cmd.Args().First(), Project: cmd.String("project"),
		Role: client.CreateKeyRequestRole(cmd.String("role")), ExpiresInS: int(cmd.Duration("expires") / time.Second)})
	if err != nil {
		return err
	}
	return printKey(cmd, k)
}

// printKey prints a new key's secret (on its own line, for pipes) or, with
// --json, the whole answer.
func printKey(cmd *cli.Command, k client.CreatedKey) error {
	if cmd.Bool("json") {
		return printJSON(stdout(cmd), k)
	}
	_, err := fmt.Fprintf(stdout(cmd), "%s\n", k.Secret)
	if err == nil {
		_, err = fmt.Fprintf(cmd.Root().ErrWriter, "key %s (%s of project %s); the secret above is not shown again\n", k.Key.ID, k.Key.Role, k.Key.Project)
	}
	return err
}

func keyList(ctx context.Context, cmd *cli.Command) error {
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	keys, err := c.ListKeys(ctx, cmd.String("project"))
	if err != nil {
		return err
	}
	if cmd.Bool("json") {
		return printJSON(stdout(cmd), client.KeyList{Keys: keys})
	}
	tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tPROJECT\tROLE\tCREATED\tLAST USED\tEXPIRES")
	for _, k := range keys {
		prefix := k.Prefix
		if prefix != "" {
			prefix = "ab_" + prefix + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, prefix, k.Project, k.Role,
			k.CreatedAt.Format("2006-01-02 15:04"), when(k.LastUsedAt), when(k.ExpiresAt))
	}
	return tw.Flush()
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format("2006-01-02 15:04")
}
