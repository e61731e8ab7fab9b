// Command bench runs agentbox's benchmarks against a real hostd (started in
// this process on a scratch data dir) and prints one table. Figures that
// depend on the machine are also given as ratios to a baseline measured in
// the same run. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	boots := flag.Int("boots", 5, "cold boots to measure")
	execs := flag.Int("execs", 200, "exec round trips to measure")
	requests := flag.Int("requests", 200, "proxied HTTPS requests to measure")
	netOnly := flag.Bool("network-only", false, "run only the egress proxy benchmarks")
	recOnly := flag.Bool("recorder-only", false, "run only the flight recorder's cost")
	mountsOnly := flag.Bool("mounts-only", false, "run only the mounts' throughput")
	guestNet := flag.Bool("guest", false, "with -network-only: also the downloads from inside a sandbox")
	flag.Parse()
	if *mountsOnly {
		t := &table{}
		if err := benchMounts(context.Background(), t); err != nil {
			return err
		}
		t.print(os.Stdout)
		return nil
	}
	if *netOnly {
		t := &table{}
		if err := benchNetwork(t, *requests); err != nil {
			return err
		}
		if *guestNet {
			if err := benchGuestDownload(context.Background(), t); err != nil {
				return err
			}
		}
		t.print(os.Stdout)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, stop, err := startHostd(ctx)
	if err != nil {
		return err
	}
	defer stop()
	t := &table{}
	if *recOnly {
		if err := benchRecorder(ctx, c, t, *execs); err != nil {
			return err
		}
		t.print(os.Stdout)
		return nil
	}
	cold, err := benchBoot(ctx, c, t, *boots)
	if err != nil {
		return err
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		return err
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
	for _, b := range []func(context.Context, *client.Client, client.Sandbox, *table, int) error{benchExec, benchFiles, benchServices, benchIdle} {
		if err := b(ctx, c, sb, t, *execs); err != nil {
			return err
		}
	}
	if err := benchSnapshots(ctx, c, t, cold); err != nil {
		return err
	}
	if err := benchRecorder(ctx, c, t, *execs); err != nil {
		return err
	}
	if err := benchNetwork(t, *requests); err != nil {
		return err
	}
	if err := benchGuestDownload(ctx, t); err != nil {
		return err
	}
	if err := benchMounts(ctx, t); err != nil {
		return err
	}
	t.print(os.Stdout)
	return nil
}

// startHostd runs hostd in this process with TCG unless AGENTBOX_ACCEL says.
func startHostd(ctx context.Context) (*client.Client, func(), error) {
	return startHostdWith(ctx, nil)
}

// startHostdWith is startHostd with a hook that adjusts the config.
func startHostdWith(ctx context.Context, adjust func(*hostd.Config)) (*client.Client, func(), error) {
	data, err := os.MkdirTemp("", "ab-bench-")
	if err != nil {
		return nil, nil, err
	}
	logf, err := os.Create(filepath.Join(data, "hostd.log"))
	if err != nil {
		return nil, nil, err
	}
	accel := os.Getenv("AGENTBOX_ACCEL")
	if accel == "" {
		accel = "tcg"
	}
	const key = "ab_bench"
	cfg := hostd.Config{Listen: "127.0.0.1:0", DataDir: data, APIKey: key, VMM: "qemu", Accel: accel,
		Logger: slog.New(slog.NewTextHandler(logf, nil))}
	if adjust != nil {
		adjust(&cfg)
	}
	ctx, cancel := context.WithCancel(ctx)
	addr := make(chan string, 1)
	done := make(chan struct{})
	var runErr error
	go func() {
		runErr = hostd.RunWithReady(ctx, cfg, func(a string) { addr <- a })
		close(done)
	}()
	stop := func() {
		cancel()
		<-done
		logf.Close()
		os.RemoveAll(data)
	}
	select {
	case a := <-addr:
		c, err := client.New("http://"+a, key)
		if err != nil {
			stop()
			return nil, nil, err
		}
		return c, stop, nil
	case <-done:
		stop()
		return nil, nil, fmt.Errorf("hostd: %w", runErr)
	case <-time.After(2 * time.Minute):
		stop()
		return nil, nil, fmt.Errorf("hostd did not start")
	}
}
