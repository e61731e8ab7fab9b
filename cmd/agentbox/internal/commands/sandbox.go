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

func createCommand() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "create a sandbox and print its id",
		UsageText: "agentbox create [--vcpus N] [--memory MiB] [--env K=V]... [--metadata K=V]... [--timeout 30m] [--snapshot SNAP | --template NAME [--start]]",
		Flags: append(append(sandboxFlags(), startFlags()...),
			&cli.BoolFlag{Name: "start", Usage: "run the template's image Entrypoint and Cmd as a background session (see agentbox ps, attach)"}),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			req, err := createRequest(cmd)
			if err != nil {
				return err
			}
			if err := setStart(cmd, &req); err != nil {
				return err
			}
			req.Start = cmd.Bool("start")
			sb, err := c.CreateSandbox(ctx, req)
			if err != nil {
				return err
			}
			if sb.MainExecID != "" && !cmd.Bool("json") {
				fmt.Fprintf(stderr(cmd), "main service: exec %s\n", sb.MainExecID)
			}
			return printResult(cmd, sb, sb.ID)
		},
	}
}

func lsCommand() *cli.Command {
	return &cli.Command{
		Name:    "ls",
		Aliases: []string{"list"},
		Usage:   "list sandboxes",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only ids"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListSandboxes(ctx)
			if err != nil {
				return err
			}
			switch {
			case cmd.Bool("json"):
				return printJSON(stdout(cmd), client.SandboxList{Sandboxes: list})
			case cmd.Bool("quiet"):
				for _, sb := range list {
					fmt.Fprintln(stdout(cmd), sb.ID)
				}
				return nil
			}
			return printSandboxes(cmd, list, time.Now())
		},
	}
}

func printSandboxes(cmd *cli.Command, list []client.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tVCPUS\tMEMORY\tAGE\tERROR")
	for _, sb := range list {
		age := now.Sub(sb.CreatedAt).Truncate(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%dMiB\t%s\t%s\n", sb.ID, sb.State, sb.VCPUs, sb.MemoryMiB, age, sb.Error)
	}
	return tw.Flush()
}

func rmCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "delete sandboxes",
		UsageText: "agentbox rm ID...",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			ids := cmd.Args().Slice()
			if len(ids) == 0 {
				return errors.New("rm: give at least one sandbox id")
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			failed := false
			for _, id := range ids {
				if err := c.DeleteSandbox(ctx, id); err != nil {
					fmt.Fprintf(stderr(cmd), "agentbox: rm %s: %v\n", id, err)
					failed = true
					continue
				}
				fmt.Fprintln(stdout(cmd), id)
			}
			if failed {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
}
