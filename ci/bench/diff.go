package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

// benchDiff measures issue 41's figures: the diff of a fork against its
// parent after 10 changed files beside one stat of each of those files
// over the API (the diff must not scale with the tree), and a diff of
// 100k changed files, paged, with its time and this process's (hostd's,
// in process) peak resident memory during it.
func benchDiff(ctx context.Context, c *client.Client, t *table, many int) error {
	parent, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 1024})
	if err != nil {
		return err
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), parent.ID)
	forks, err := c.Fork(ctx, parent.ID, 1)
	if err != nil {
		return err
	}
	f := forks[0].ID
	defer c.DeleteSandbox(context.WithoutCancel(ctx), f)
	if _, err := c.Exec(ctx, f, client.ExecRequest{Cmd: []string{"sh", "-c", "mkdir -p /root/ten && for i in $(seq 10); do echo $i > /root/ten/f$i; done"}}); err != nil {
		return err
	}
	var diffs, stats []time.Duration
	for range 3 {
		start := time.Now()
		d, err := c.Diff(ctx, f, parent.ID, client.DiffOptions{})
		if err != nil {
			return err
		}
		diffs = append(diffs, time.Since(start))
		if n := countUnder(d, "/root/ten/"); n != 10 {
			return fmt.Errorf("diff: %d of the 10 files, want 10", n)
		}
		start = time.Now()
		for i := 1; i <= 10; i++ {
			if _, err := c.Stat(ctx, f, "/root/ten/f"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		stats = append(stats, time.Since(start))
	}
	pd, ps := pct(diffs, 0.5), pct(stats, 0.5)
	fmt.Fprintf(os.Stderr, "bench: diff after 10 files %s, 10 stats %s\n", ms(pd), ms(ps))
	t.add("diff of a fork after 10 changed files (journal) ÷ a stat of each of the 10 over the API, p50 of 3",
		fmt.Sprintf("%.2f×", float64(pd)/float64(ps)), ms(pd)+" vs "+ms(ps))
	if many <= 0 {
		return nil
	}
	script := fmt.Sprintf("import os\nos.makedirs('/root/many', exist_ok=True)\nfor i in range(%d):\n    open('/root/many/f%%06d' %% i, 'w').write(str(i))\n", many)
	if r, err := c.Exec(ctx, f, client.ExecRequest{Cmd: []string{"python3", "-c", script}, TimeoutS: 3600}); err != nil || r.ExitCode != 0 {
		return fmt.Errorf("make %d files: %v %s", many, err, r.Stderr)
	}
	fmt.Fprintf(os.Stderr, "bench: %d files made\n", many)
	resetPeak()
	before := peakRSS()
	start := time.Now()
	n, pages := 0, 0
	err = c.DiffAll(ctx, f, parent.ID, client.DiffOptions{Path: "/root/many", Limit: 10000}, func(d client.Diff) error {
		n += len(d.Entries)
		pages++
		return nil
	})
	if err != nil {
		return err
	}
	took := time.Since(start)
	t.add(fmt.Sprintf("diff of %d changed files (%d pages of 10000): time, hostd's peak RSS (in the bench's process)", many, pages),
		took.Round(time.Millisecond).String(), fmt.Sprintf("%d entries, peak %d MiB (was %d MiB)", n, peakRSS()>>20, before>>20))
	return nil
}

func countUnder(d client.Diff, prefix string) int {
	n := 0
	for _, e := range d.Entries {
		if strings.HasPrefix(e.Path, prefix) {
			n++
		}
	}
	return n
}

// resetPeak resets this process's peak RSS (VmHWM) to its current RSS.
func resetPeak() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS is this process's peak RSS (VmHWM) in bytes.
func peakRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
