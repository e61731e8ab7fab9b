package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/apitypes"
)

// hostCommand is `agentbox host`: a fleet's hosts, through its control
// plane (AGENTBOX_URL pointing at `agentbox gateway`), with an admin key.
func hostCommand() *cli.Command {
	action := func(name, usage string) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage, UsageText: "agentbox host " + name + " HOST",
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.Args().Len() != 1 {
					return &UsageError{Err: errors.New("give one host name")}
				}
				c, err := newClient(cmd)
				if err != nil {
					return err
				}
				h, err := c.SetHostAdmin(ctx, cmd.Args().First(), name)
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout(cmd), "%s %s\n", h.Name, h.Admin)
				return nil
			},
		}
	}
	return &cli.Command{
		Name:  "host",
		Usage: "a fleet's hosts (through its control plane, with an admin key)",
		Commands: []*cli.Command{
			{
				Name: "ls", Usage: "list the hosts: state, lease, capacity, sandboxes",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := newClient(cmd)
					if err != nil {
						return err
					}
					hosts, err := c.Hosts(ctx)
					if err != nil {
						return err
					}
					if cmd.Bool("json") {
						return printJSON(stdout(cmd), apitypes.HostList{Hosts: hosts})
					}
					return printHosts(cmd, hosts)
				},
			},
			action("cordon", "place no new sandboxes on a host"),
			action("uncordon", "let a cordoned or drained host take sandboxes again"),
			action("drain", "cordon a host for removal (with portable snapshots, its sandboxes move off it)"),
		},
	}
}

func printHosts(cmd *cli.Command, hosts []apitypes.Host) error {
	tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tADMIN\tEPOCH\tLEASE\tMEMORY MiB\tVCPUS\tSANDBOXES\tADDR\tREASON")
	for _, h := range hosts {
		lease := time.Until(h.LeaseUntil).Round(100 * time.Millisecond).String()
		state := h.State
		if !h.TokenAccepted {
			state += " (token refused)"
		}
		sb := fmt.Sprint(h.Sandboxes)
		if h.MaxSandboxes > 0 {
			sb += fmt.Sprintf("/%d", h.MaxSandboxes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d/%d\t%d/%d\t%s\t%s\t%s\n", h.Name, state, h.Admin, h.Epoch, lease,
			h.UsedMemoryMiB, h.MemoryMiB, h.UsedVCPUs, h.VCPUs, sb, h.Addr, strings.TrimSpace(h.Reason))
	}
	return tw.Flush()
}
