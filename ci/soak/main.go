// Command soak puts a real hostd (run as a child process on a scratch data
// dir) under load for a bounded time and prints one table: concurrent execs
// and checksummed file round trips, pause/resume cycles of a sandbox holding
// files and a running process, and guest abuse in one sandbox measured from
// another, and hostd killed with -9 (at rest, mid-stream, and at fault
// points in the middle of an exec, a create and a delete) and started again
// on the same data dir with its sandboxes running. `make soak` runs the full
// version, `make soak-short` a quick one. It exits non-zero when a goal row
// (no errors, losses, leaks or mismatches) fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/figures"
)

type options struct {
	hostd     string
	sandboxes int
	clients   int
	duration  time.Duration
	cycles    int
	files     int
	probe     time.Duration
	abuseFor  time.Duration
	outputMiB int
	listFiles int
	memoryMiB int
	skipAbuse bool
	restarts  int
	kinds     []string
	reapEvery time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.hostd, "hostd", "", "hostd binary (default: build ./cmd/hostd)")
	flag.IntVar(&o.sandboxes, "sandboxes", 4, "sandboxes under load (at least 2: the last is also the abused one)")
	flag.IntVar(&o.clients, "clients", 4, "concurrent clients per sandbox")
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "how long the load runs")
	flag.IntVar(&o.cycles, "cycles", 100, "pause/resume cycles")
	flag.IntVar(&o.files, "files", 200, "files checksummed across the pause/resume cycles")
	flag.DurationVar(&o.probe, "probe", 20*time.Second, "how long the quiet exec probe runs before the abuse")
	flag.DurationVar(&o.abuseFor, "abuse-for", 20*time.Second, "how long the fork bomb and the memory hog run")
	flag.IntVar(&o.outputMiB, "output-mib", 200, "MiB of output the abused sandbox writes")
	flag.IntVar(&o.listFiles, "list-files", 100000, "files the abused sandbox creates and the API lists")
	flag.IntVar(&o.memoryMiB, "memory-mib", 512, "guest memory of each sandbox")
	flag.BoolVar(&o.skipAbuse, "no-abuse", false, "skip the guest abuse part")
	flag.IntVar(&o.restarts, "restarts", 20, "hostd kill -9 / restart cycles (0: skip)")
	flag.DurationVar(&o.reapEvery, "reap-interval", 3*time.Second, "hostd's reaper round: short, so that every part runs with the reaper looking (hostd's default is 1m)")
	kinds := flag.String("restart-kinds", strings.Join(restartKinds, ","), "the kinds of restart cycle, run in turn: "+strings.Join(restartKinds, ", "))
	flag.Parse()
	o.kinds = strings.Split(*kinds, ",")
	for _, k := range o.kinds {
		if !slices.Contains(restartKinds, k) {
			fmt.Fprintf(os.Stderr, "soak: -restart-kinds: no kind %q\n", k)
			os.Exit(2)
		}
	}
	if o.sandboxes < 2 {
		fmt.Fprintln(os.Stderr, "soak: -sandboxes must be at least 2")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	t, err := run(ctx, o)
	stop()
	if t != nil {
		t.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if f := t.Failed(); len(f) > 0 {
		fmt.Fprintf(os.Stderr, "soak: %d goals not met: %s\n", len(f), strings.Join(f, "; "))
		os.Exit(1)
	}
}

// progress reports on stderr what the soak is doing (the table goes to
// stdout at the end).
func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s soak: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func run(ctx context.Context, o options) (*figures.Table, error) {
	t := &figures.Table{Head: "soak"}
	h, err := startHostd(ctx, o.hostd, o.reapEvery)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	err = soakAll(ctx, h, o, t)
	return t, errors.Join(err, cleanUp(context.WithoutCancel(ctx), h, t))
}

// soakAll runs every part of the soak on hostd h.
func soakAll(ctx context.Context, h *hostdProc, o options, t *figures.Table) error {
	rss0, err := h.rssMiB()
	if err != nil {
		return err
	}
	sbs, err := createSandboxes(ctx, h.c, o)
	if err != nil {
		return err
	}
	if err := soakLoad(ctx, h, sbs, o, rss0, t); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if err := soakPause(ctx, h.c, sbs[0], o, t); err != nil {
		return fmt.Errorf("pause/resume: %w", err)
	}
	if !o.skipAbuse {
		if err := soakAbuse(ctx, h.c, sbs[0], sbs[len(sbs)-1], o, t); err != nil {
			return fmt.Errorf("abuse: %w", err)
		}
	}
	rss1, err := h.rssMiB()
	if err != nil {
		return err
	}
	t.Add("hostd RSS at start → end of the soak before the restarts", fmt.Sprintf("%.0f → %.0f MiB", rss0, rss1), "")
	if o.restarts > 0 {
		if err := soakRestarts(ctx, h, sbs, o, t); err != nil {
			return fmt.Errorf("restarts: %w", err)
		}
	}
	return nil
}

// cleanUp deletes every sandbox, stops hostd with SIGTERM and checks that
// nothing of its data dir is left on the host: no VMM, namespace, cgroup
// or sandbox directory.
func cleanUp(ctx context.Context, h *hostdProc, t *figures.Table) error {
	progress("clean-up: deleting every sandbox, stopping hostd")
	var errs []error
	if h.exited() {
		if _, err := h.start(ctx, ""); err != nil {
			return fmt.Errorf("clean-up: %w", err)
		}
	}
	list, err := h.c.ListSandboxes(ctx)
	errs = append(errs, err)
	for _, sb := range list {
		if err := h.c.DeleteSandbox(ctx, sb.ID); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", sb.ID, err))
		}
	}
	if err := h.term(); err != nil {
		errs = append(errs, fmt.Errorf("hostd on SIGTERM: %w", err))
	}
	left, _, err := settle(10*time.Second, func() ([]string, error) {
		v, err := observe(h.dataDir())
		return v.left(), err
	})
	errs = append(errs, err)
	t.Goal(fmt.Sprintf("after deleting every sandbox (%d) and stopping hostd: left on the host", len(list)), len(left),
		"VMMs, namespaces, cgroups, sandbox dirs"+firstOf(left))
	return errors.Join(errs...)
}

// createSandboxes boots one sandbox, with the pids and disk limits that
// bound the abuse, and forks the others from it (a fork is far cheaper
// than a cold boot under TCG, and keeps the limits).
func createSandboxes(ctx context.Context, c *client.Client, o options) ([]client.Sandbox, error) {
	start := time.Now()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: o.memoryMiB, ExecTimeoutS: 3600, MaxPids: 128, DiskMiB: 512})
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	progress("sandbox %s booted in %s", sb.ID, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	forks, err := c.Fork(ctx, sb.ID, o.sandboxes-1)
	if err != nil {
		return []client.Sandbox{sb}, fmt.Errorf("fork %d: %w", o.sandboxes-1, err)
	}
	progress("%d forks of it up in %s", len(forks), time.Since(start).Round(time.Millisecond))
	return append([]client.Sandbox{sb}, forks...), nil
}
