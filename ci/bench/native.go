package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// native holds the figures of benchNative that the emulated rows are put
// beside.
type native struct {
	create, restore, fork, exec, stat, hostTrue time.Duration
	write, read                                 float64 // MiB/s
}

// benchNative runs the product's paths once more on a hostd over vmmtest's
// in-process driver: the real guest agent serves in this process, commands
// run as host processes and files land on the host. So each figure here is
// agentbox's own code (API, manager, store, overlays, network namespace,
// cgroup, flight recorder, agent client, protocol, agent) and no emulator.
// Put beside the same figure under TCG it splits that figure into our code
// and the emulator; it is also about what the figure comes to where the
// guest runs at the host's speed (KVM), plus the VMM's own restore.
func benchNative(ctx context.Context, e *env, execs int) (native, error) {
	var n native
	e.p.step("native agent: hostd over the in-process driver")
	c, stop, err := startHostdWith(ctx, func(cfg *hostd.Config) {
		cfg.Driver = vmmtest.NewFakeDriver(vmmtest.FakeOptions{})
		cfg.BasePool = -1
		cfg.NoCgroups = true // its VMs are no processes (the cgroup phase is 1-2 ms under TCG)
	})
	if err != nil {
		return n, err
	}
	defer stop()
	req := client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512}
	if _, err := e.createsOn(ctx, c, "native: first create", 1, req); err != nil {
		return n, err
	}
	creates, err := e.createsOn(ctx, c, "native: create (base snapshot)", 5, req)
	if err != nil {
		return n, err
	}
	n.create = pct(creates, 0.5)
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		return n, err
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
	if n.exec, n.hostTrue, err = nativeExec(ctx, c, sb.ID, execs); err != nil {
		return n, err
	}
	if n.stat, err = timedN(execs, func() error { _, err := c.Stat(ctx, sb.ID, "/"); return err }); err != nil {
		return n, err
	}
	e.p.step("native: 64 MiB file write and read")
	if n.write, n.read, err = nativeFiles(ctx, c, sb.ID); err != nil {
		return n, err
	}
	sn, err := c.Snapshot(ctx, sb.ID, client.SnapshotRequest{})
	if err != nil {
		return n, err
	}
	restores, err := e.createsOn(ctx, c, "native: restore a snapshot", 5, client.CreateSandboxRequest{Snapshot: sn.ID})
	if err != nil {
		return n, err
	}
	n.restore = pct(restores, 0.5)
	e.p.step("native: fork 1 (3)")
	var forks []time.Duration
	for range 3 { // timed without the delete, as the emulated row is
		start := time.Now()
		f, err := c.Fork(ctx, sb.ID, 1)
		if err != nil {
			return n, err
		}
		forks = append(forks, time.Since(start))
		for _, f := range f {
			if err := c.DeleteSandbox(ctx, f.ID); err != nil {
				return n, err
			}
		}
	}
	n.fork = pct(forks, 0.5)
	return n, nil
}

// nativeExec is the p50 of n execs of `true` through the API, beside the
// p50 of the host's own fork/exec of it.
func nativeExec(ctx context.Context, c *client.Client, id string, n int) (api, local time.Duration, err error) {
	if api, err = timedN(n, func() error {
		_, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"true"}})
		return err
	}); err != nil {
		return 0, 0, err
	}
	local, err = timedN(n, func() error { return exec.Command("true").Run() })
	return api, local, err
}

// nativeFiles is fileRates into a scratch directory of the host, where the
// in-process agent puts the file.
func nativeFiles(ctx context.Context, c *client.Client, id string) (w, r float64, err error) {
	dir, err := os.MkdirTemp("", "ab-native-files-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	return fileRates(ctx, c, id, filepath.Join(dir, "bench.bin"))
}

// timedN runs fn n times and returns the p50.
func timedN(n int, fn func() error) (time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		d = append(d, time.Since(start))
	}
	return pct(d, 0.5), nil
}

// addTo puts the native figures into the table, each beside the same
// figure under the emulator (emu: env.emu, by its keys create, restore,
// fork, exec and stat).
func (n native) addTo(t *table, emu map[string]time.Duration) {
	row := func(name string, d time.Duration, key string) {
		note := ""
		if e := emu[key]; e > 0 {
			note = fmt.Sprintf("under TCG %s: %.0f%% of it is the emulator", ms(e), 100*(1-float64(d)/float64(e)))
		}
		t.dur("  native: "+name, d, "", 0, "", note)
	}
	t.add("agentbox's own code: the same paths with the agent native (in-process driver, no emulator)", "", "what a KVM host adds: the VMM's restore, the channel")
	row("create without a template (base snapshot), p50 of 5", n.create, "create")
	row("restore a snapshot, p50 of 5", n.restore, "restore")
	row("fork 1, p50 of 3", n.fork, "fork")
	t.dur("  native: exec `true` round trip (API), p50", n.exec, "local fork/exec of `true`", n.hostTrue, "≤ 1.3× floor",
		fmt.Sprintf("under TCG %s", ms(emu["exec"])))
	row("one agent call through the API (stat /), p50", n.stat, "stat")
	t.rate("  native: 64 MiB file write (API → host disk, fsynced)", n.write, "", 0, "", "")
	t.rate("  native: 64 MiB file read", n.read, "", 0, "", "")
}
