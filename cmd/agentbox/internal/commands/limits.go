package commands

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// limitFlags are a new sandbox's resource limits (0: hostd's default).
func limitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.FloatFlag{Name: "cpu-quota", Usage: "host CPU time the VM may use, in CPUs (e.g. 0.5)"},
		&cli.IntFlag{Name: "host-memory", Usage: "host memory cap of the VMM process in MiB"},
		&cli.IntFlag{Name: "disk", Usage: "root filesystem size the guest can fill, in MiB"},
		&cli.Int64Flag{Name: "disk-bps", Usage: "disk bandwidth cap in bytes per second"},
		&cli.Int64Flag{Name: "net-bps", Usage: "network bandwidth cap in bytes per second, each direction"},
		&cli.IntFlag{Name: "max-pids", Usage: "most processes the sandbox's commands may run at once"},
		&cli.DurationFlag{Name: "exec-timeout", Usage: "default timeout of each command (e.g. 10m)"},
		&cli.DurationFlag{Name: "idle-timeout", Usage: "pause the sandbox after this long idle (e.g. 5m)"},
		&cli.StringFlag{Name: "on-timeout", Usage: "what --timeout's end does: delete or pause"},
	}
}

// setLimits applies limitFlags to req.
func setLimits(cmd *cli.Command, req *client.CreateSandboxRequest) {
	req.CPUQuota = cmd.Float("cpu-quota")
	req.HostMemoryMiB = cmd.Int("host-memory")
	req.DiskMiB = cmd.Int("disk")
	req.DiskBps = cmd.Int64("disk-bps")
	req.NetBps = cmd.Int64("net-bps")
	req.MaxPids = cmd.Int("max-pids")
	if t := cmd.Duration("exec-timeout"); t > 0 {
		req.ExecTimeoutS = max(int(t.Seconds()), 1)
	}
	if t := cmd.Duration("idle-timeout"); t > 0 {
		req.IdleTimeoutS = max(int(t.Seconds()), 1)
	}
	req.OnTimeout = client.CreateSandboxRequestOnTimeout(cmd.String("on-timeout"))
}

// limitCommands are usage and extend.
func limitCommands() []*cli.Command {
	return []*cli.Command{usageCommand(), extendCommand()}
}

func usageCommand() *cli.Command {
	return &cli.Command{
		Name:      "usage",
		Usage:     "show what a sandbox has consumed",
		UsageText: "agentbox usage ID",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := oneArg(cmd, "a sandbox id")
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			u, err := c.Usage(ctx, id)
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				return printJSON(stdout(cmd), u)
			}
			tw := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "cpu\t%.2f s\nmemory peak\t%d MiB\nmemory now\t%d MiB\ndisk used\t%d MiB\nbytes in\t%d\nbytes out\t%d\n",
				u.CPUSeconds, u.MemoryPeakBytes>>20, u.MemoryBytes>>20, u.DiskUsedBytes>>20, u.BytesIn, u.BytesOut)
			return tw.Flush()
		},
	}
}

func extendCommand() *cli.Command {
	return &cli.Command{
		Name:      "extend",
		Usage:     "make a sandbox's timeout end SECONDS from now",
		UsageText: "agentbox extend ID SECONDS",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 2 {
				return fmt.Errorf("extend: give a sandbox id and seconds")
			}
			secs, err := strconv.Atoi(cmd.Args().Get(1))
			if err != nil {
				return fmt.Errorf("extend: seconds: %w", err)
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			sb, err := c.ExtendTimeout(ctx, cmd.Args().First(), secs)
			if err != nil {
				return err
			}
			return printResult(cmd, sb, sb.ID, sb.Deadline)
		},
	}
}
