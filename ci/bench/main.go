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
	"runtime/pprof"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/hostd"
)

func main() {
	t := &table{}
	if err := run(t); err != nil {
		if len(t.figs) > 0 {
			fmt.Println("(partial: the bench failed)")
			t.print(os.Stdout)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// env is what the product benchmarks share: the hostd client, the table,
// the floors measured first, the progress line and hostd's create phases.
type env struct {
	c  *client.Client
	t  *table
	fl floors
	p  *progress
	ph *phases
	// url and key reach the hostd's API directly (metrics).
	url, key string
	// emu are the p50s under the emulator that benchNative's rows are put
	// beside: create, restore, fork, exec, stat.
	emu map[string]time.Duration
}

// options are the bench's flags.
type options struct {
	boots, execs, requests, density, densityRow      int
	netOnly, recOnly, mountsOnly, coreOnly, guestNet bool
	diffOnly                                         bool
	diffFiles                                        int
	nativeOnly, floorsOnly, fleetOnly                bool
	jsonOut, compareOld, cpuProfile                  string
	densityLimit                                     time.Duration
}

func parseFlags() options {
	var o options
	flag.IntVar(&o.boots, "boots", 5, "cold boots (and restores, bare boots) to measure")
	flag.IntVar(&o.execs, "execs", 200, "exec round trips to measure")
	flag.IntVar(&o.requests, "requests", 200, "proxied HTTPS requests to measure")
	flag.BoolVar(&o.netOnly, "network-only", false, "run only the egress proxy benchmarks")
	flag.BoolVar(&o.recOnly, "recorder-only", false, "run only the flight recorder's cost")
	flag.BoolVar(&o.mountsOnly, "mounts-only", false, "run only the mounts' throughput")
	flag.BoolVar(&o.diffOnly, "diff-only", false, "run only the diff figures (issue 41)")
	flag.IntVar(&o.diffFiles, "diff-files", 100000, "with -diff-only: the changed files of the big diff (0: none)")
	flag.BoolVar(&o.coreOnly, "core", false, "run only the floors, creates, exec, files and snapshots (no services, recorder, network, mounts)")
	flag.BoolVar(&o.floorsOnly, "floors-only", false, "run only the machine's floors (bare QEMU: boot, clone, restore, channel)")
	flag.BoolVar(&o.nativeOnly, "native-only", false, "run only the native-agent figures (no emulator)")
	flag.BoolVar(&o.guestNet, "guest", false, "with -network-only: also the downloads from inside a sandbox")
	flag.StringVar(&o.compareOld, "compare", "", "print the figures of the run in this JSON file beside those of -json's file, and exit")
	flag.StringVar(&o.jsonOut, "json", "bin/bench.json", "also write the figures here as JSON (empty: don't)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (hostd, and with -native-only the agent too) to this file")
	flag.IntVar(&tbSize, "tb-size", 0, "TCG translation cache per VM in MiB (-accel tcg,tb-size=N; 0: QEMU's default)")
	flag.BoolVar(&o.fleetOnly, "fleet-only", false, "run only the fleet section (create, exec, read through a gateway against hostd directly)")
	flag.IntVar(&o.density, "density", 0, "run only the density bench: start this many sandboxes from one template")
	flag.IntVar(&o.densityRow, "density-row", 10, "the full bench's density row: this many sandboxes (0: none)")
	flag.DurationVar(&o.densityLimit, "density-timeout", 10*time.Minute, "with -density: stop starting sandboxes after this long")
	flag.Parse()
	return o
}

func run(t *table) error {
	o := parseFlags()
	if o.compareOld != "" {
		return compare(os.Stdout, o.compareOld, o.jsonOut)
	}
	p := &progress{start: time.Now(), w: os.Stderr}
	if o.cpuProfile != "" {
		stop, err := startProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	done := func() error {
		t.print(os.Stdout)
		return t.writeJSON(o.jsonOut)
	}
	if o.mountsOnly {
		if err := benchMounts(context.Background(), t); err != nil {
			return err
		}
		return done()
	}
	if o.netOnly {
		if err := benchNetwork(t, o.requests); err != nil {
			return err
		}
		if o.guestNet {
			if err := benchGuestDownload(context.Background(), t); err != nil {
				return err
			}
		}
		return done()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &env{t: t, p: p, emu: map[string]time.Duration{}}
	if o.nativeOnly {
		nat, err := benchNative(ctx, e, o.execs)
		if err != nil {
			return err
		}
		nat.addTo(t, e.emu)
		return done()
	}
	if !o.recOnly && !o.diffOnly && o.density == 0 && !o.fleetOnly {
		fl, err := measureFloors(ctx, o.boots, p)
		if err != nil {
			return fmt.Errorf("floors: %w", err)
		}
		e.fl = fl
		fl.addTo(t, o.boots)
		if o.floorsOnly {
			return done()
		}
	}
	p.step("starting hostd")
	c, stop, err := startHostd(ctx, e)
	if err != nil {
		return err
	}
	defer stop()
	e.c = c
	if o.diffOnly {
		if err := benchDiff(ctx, c, t, o.diffFiles); err != nil {
			return err
		}
		return done()
	}
	if o.recOnly {
		if err := benchRecorder(ctx, c, t, o.execs); err != nil {
			return err
		}
		return done()
	}
	if o.fleetOnly {
		if err := benchFleet(ctx, e, o.execs); err != nil {
			return err
		}
		return done()
	}
	if o.density > 0 {
		if err := benchDensity(ctx, e, o.density, o.densityLimit); err != nil {
			return err
		}
		return done()
	}
	cold, err := benchBoot(ctx, e, o.boots)
	if err != nil {
		return err
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		return err
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
	for _, b := range []func(context.Context, *env, client.Sandbox, int) error{benchExec, benchFiles} {
		if err := b(ctx, e, sb, o.execs); err != nil {
			return err
		}
	}
	if err := benchSnapshots(ctx, e, cold); err != nil {
		return err
	}
	if err := benchBasePool(ctx, e); err != nil {
		return err
	}
	nat, err := benchNative(ctx, e, o.execs)
	if err != nil {
		return fmt.Errorf("native agent: %w", err)
	}
	nat.addTo(t, e.emu)
	if err := benchFleet(ctx, e, o.execs); err != nil {
		return err
	}
	if o.densityRow > 0 {
		if err := benchDensity(ctx, e, o.densityRow, o.densityLimit); err != nil {
			return err
		}
	}
	if o.coreOnly {
		return done()
	}
	if err := benchRest(ctx, e, sb, o.execs, o.requests); err != nil {
		return err
	}
	return done()
}

// startProfile writes a CPU profile of the bench process to path until
// the returned func is called.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// benchRest runs what the full bench adds to -core: services, idle pause,
// the flight recorder, the egress proxy, downloads and mounts.
func benchRest(ctx context.Context, e *env, sb client.Sandbox, execs, requests int) error {
	c, t, p := e.c, e.t, e.p
	p.step("services")
	if err := benchServices(ctx, c, sb, t, execs); err != nil {
		return err
	}
	if err := benchIdle(ctx, e, sb, execs); err != nil {
		return err
	}
	p.step("flight recorder")
	if err := benchRecorder(ctx, c, t, execs); err != nil {
		return err
	}
	p.step("egress proxy")
	if err := benchNetwork(t, requests); err != nil {
		return err
	}
	p.step("downloads from a sandbox")
	if err := benchGuestDownload(ctx, t); err != nil {
		return err
	}
	p.step("mounts")
	return benchMounts(ctx, t)
}

// The overcommit the bench's hostd admits with (startHostd), printed by
// the density run.
const (
	densityMemOvercommit  = 6
	densityVCPUOvercommit = 128
)

// startHostd runs hostd in this process with TCG unless AGENTBOX_ACCEL says,
// without a base warm pool (so creates restore the base snapshot; the pool
// is benchBasePool's), collecting its create phases into e.
func startHostd(ctx context.Context, e *env) (*client.Client, func(), error) {
	return startHostdWith(ctx, func(cfg *hostd.Config) {
		cfg.BasePool = -1
		// The density bench promises up to 200 idle 512 MiB sandboxes on
		// a 24 GiB, 2-CPU host: past the default overcommit (2x memory,
		// 32 vCPUs per CPU), which a host of busy sandboxes keeps.
		cfg.MemoryOvercommit, cfg.VCPUOvercommit = densityMemOvercommit, densityVCPUOvercommit
		e.ph = newPhases(cfg.Logger.Handler())
		cfg.Logger = slog.New(e.ph)
	})
}

// tbSize is -tb-size: hostd's TCGTBSizeMiB.
var tbSize int

// lastURL is the API address of the hostd startHostdWith started last.
var lastURL string

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
	// The host token of the fleet bench's host, so the fleet section puts a
	// gateway in front of this very hostd.
	key := hosttoken.Token(fleetSecret, fleetHost)
	cfg := hostd.Config{Listen: "127.0.0.1:0", DataDir: data, APIKey: key, VMM: "qemu", Accel: accel,
		Logger: slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	cfg.TCGTBSizeMiB = tbSize
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
		if os.Getenv("AGENTBOX_BENCH_KEEP") == "" {
			os.RemoveAll(data)
		} else {
			fmt.Fprintln(os.Stderr, "bench: kept", data)
		}
	}
	select {
	case a := <-addr:
		lastURL = "http://" + a
		c, err := client.New(lastURL, key)
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
