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
			drainCommand(),
		},
	}
}

// drainCommand is `agentbox host drain HOST`: the host takes nothing new
// and, with portable snapshots, every sandbox moves off it (what the
// DaemonSet's preStop and a rolling upgrade run).
func drainCommand() *cli.Command {
	return &cli.Command{
		Name:      "drain",
		Usage:     "cordon a host for removal; with portable snapshots every sandbox moves off it (running ones keep their processes) before it returns",
		UsageText: "agentbox host drain HOST",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return &UsageError{Err: errors.New("give one host name")}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			d, err := c.DrainHost(ctx, cmd.Args().First())
			if d.Name != "" {
				if cmd.Bool("json") {
					if perr := printJSON(stdout(cmd), d); perr != nil {
						return perr
					}
				} else {
					fmt.Fprintf(stdout(cmd), "%s %s: %d sandbox(es) moved, %d left\n", d.Name, d.Admin, d.Moved, d.Sandboxes)
					for id, why := range d.Failed {
						fmt.Fprintf(stdout(cmd), "  %s did not move: %s\n", id, why)
					}
				}
			}
			return err
		},
	}
}

// migrateCommand is `agentbox migrate ID [--host H]`.
func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:      "migrate",
		Usage:     "move a sandbox of a fleet to another host, with its files and processes (portable snapshots)",
		UsageText: "agentbox migrate ID [--host HOST]",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "host", Usage: "the `HOST` to move it to (default: one the fleet places)"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := oneArg(cmd, "a sandbox id")
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			sb, err := c.Migrate(ctx, id, cmd.String("host"))
			if err != nil {
				return err
			}
			return printResult(cmd, sb, sb.ID)
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
