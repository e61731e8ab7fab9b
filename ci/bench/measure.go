package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// benchBoot measures cold boots (boot: cold) and creates that restore the
// base snapshot, with their per-phase breakdowns; it returns the cold p50.
func benchBoot(ctx context.Context, e *env, n int) (time.Duration, error) {
	cold, err := e.creates(ctx, "cold boot", n, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512, Boot: client.CreateSandboxRequestBootCold})
	if err != nil {
		return 0, err
	}
	e.t.dur(fmt.Sprintf("cold boot → agent ready (create, boot: cold), p50 of %d", n), pct(cold, 0.5), "bare boot", e.fl.boot,
		"≤ 1.2× floor", "min "+ms(pct(cold, 0))+", max "+ms(pct(cold, 1)))
	e.t.addPhases("cold", e.ph)
	first, err := e.creates(ctx, "first create (boot + base snapshot)", 1, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		return 0, err
	}
	e.t.dur("first create without a template (cold boot + base snapshot capture)", first[0], "", 0, "", "once per shape and boot assets")
	e.ph.take()
	base, err := e.creates(ctx, "create (base snapshot)", n, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		return 0, err
	}
	e.t.dur(fmt.Sprintf("create without a template (base snapshot restore) → agent ready, p50 of %d", n), pct(base, 0.5), "bare clone", e.fl.clone,
		"≤ 400 ms", "min "+ms(pct(base, 0))+", max "+ms(pct(base, 1)))
	e.t.addPhases("base restore", e.ph)
	e.emu["create"] = pct(base, 0.5)
	if err := firstExecs(ctx, e, 3); err != nil {
		return 0, err
	}
	return pct(cold, 0.5), nil
}

// firstExecs times the first exec of `true` in n sandboxes just created
// from the base snapshot, beside the exec after it: what a user waits for
// after "agent ready" (the guest's first spawn, the binary's first read,
// the VMM's first translation of that path).
func firstExecs(ctx context.Context, e *env, n int) error {
	var first, second []time.Duration
	for i := range n {
		e.p.step(fmt.Sprintf("first exec after a create %d/%d", i+1, n))
		sb, err := e.c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
		if err != nil {
			return err
		}
		for _, d := range []*[]time.Duration{&first, &second} {
			start := time.Now()
			if _, err = e.c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
				break
			}
			*d = append(*d, time.Since(start))
		}
		if err := errors.Join(err, e.c.DeleteSandbox(ctx, sb.ID)); err != nil {
			return err
		}
	}
	e.t.dur(fmt.Sprintf("  first exec `true` in a sandbox just created (base snapshot), p50 of %d", n), pct(first, 0.5), "", 0, "",
		"the exec after it: "+ms(pct(second, 0.5)))
	return nil
}

// creates times n creates of req (deleting each).
func (e *env) creates(ctx context.Context, what string, n int, req client.CreateSandboxRequest) ([]time.Duration, error) {
	return e.createsOn(ctx, e.c, what, n, req)
}

// createsOn is creates on the hostd of c.
func (e *env) createsOn(ctx context.Context, c *client.Client, what string, n int, req client.CreateSandboxRequest) ([]time.Duration, error) {
	var d []time.Duration
	for i := range n {
		e.p.step(fmt.Sprintf("%s %d/%d", what, i+1, n))
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, req)
		if err != nil {
			return nil, err
		}
		d = append(d, time.Since(start))
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func benchExec(ctx context.Context, e *env, sb client.Sandbox, n int) error {
	// The floor is measured in rounds between the round trips' rounds, so
	// that a slow minute of this machine weighs on both alike.
	const rounds = 4
	var floors, guest, local []time.Duration
	for r := range rounds {
		e.p.step(fmt.Sprintf("exec round trips and `true` spawned inside the guest (round %d of %d)", r+1, rounds))
		f, err := guestTrue(ctx, e.c, sb.ID)
		if err != nil {
			return err
		}
		floors = append(floors, f...)
		for i := r * n / rounds; i < (r+1)*n/rounds; i++ {
			start := time.Now()
			if _, err := e.c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
				return err
			}
			guest = append(guest, time.Since(start))
			start = time.Now()
			if err := exec.Command("true").Run(); err != nil {
				return err
			}
			local = append(local, time.Since(start))
		}
	}
	floor := pct(floors, 0.5)
	e.fl.guestTrue = floor
	p50, p99, l50 := pct(guest, 0.5), pct(guest, 0.99), pct(local, 0.5)
	e.emu["exec"] = p50
	e.t.dur(fmt.Sprintf("exec `true` round trip (API), p50 of %d", n), p50, "`true` in the guest", floor, "≤ 1.3× floor",
		fmt.Sprintf("p99 %s; floor: p50 of %d, in %d rounds between the round trips'", ms(p99), len(floors), rounds))
	e.t.dur("local fork/exec of `true` on the host, p50", l50, "", 0, "", "baseline, same run")
	return execBreakdown(ctx, e, sb, n, p50)
}

// execBreakdown puts an exec's round trip beside one agent call through the
// API (a stat: HTTP, the API, one ttrpc call and its answer) and the raw
// channel's round trip, so that what an exec adds beyond one call and the
// guest's own spawn of `true` shows.
func execBreakdown(ctx context.Context, e *env, sb client.Sandbox, n int, exec50 time.Duration) error {
	e.p.step(fmt.Sprintf("stat round trips (%d)", n))
	var stat []time.Duration
	for range n {
		start := time.Now()
		if _, err := e.c.Stat(ctx, sb.ID, "/"); err != nil {
			return err
		}
		stat = append(stat, time.Since(start))
	}
	s50 := pct(stat, 0.5)
	e.emu["stat"] = s50
	e.t.dur(fmt.Sprintf("  one agent call through the API (stat /), p50 of %d", n), s50, "raw channel round trip", e.fl.rtt, "", "p99 "+ms(pct(stat, 0.99)))
	rest := exec50 - s50 - e.fl.guestTrue
	e.t.dur("  exec beyond one agent call and the guest's spawn of `true`", rest, "", 0, "",
		fmt.Sprintf("exec %s − stat %s − `true` in the guest %s", ms(exec50), ms(s50), ms(e.fl.guestTrue)))
	return nil
}

// guestTrue times 30 spawns of `/bin/true` inside the guest, timed there.
func guestTrue(ctx context.Context, c *client.Client, id string) ([]time.Duration, error) {
	const script = `import subprocess, time
for _ in range(30):
    t = time.perf_counter_ns(); subprocess.run(["/bin/true"]); print(time.perf_counter_ns() - t)`
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"python3", "-c", script}})
	if err != nil {
		return nil, err
	}
	var d []time.Duration
	for _, f := range strings.Fields(r.Stdout) {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("guest true: %q: %w", r.Stdout, err)
		}
		d = append(d, time.Duration(ns))
	}
	if len(d) == 0 {
		return nil, fmt.Errorf("guest true: no times in %q (stderr %q)", r.Stdout, r.Stderr)
	}
	return d, nil
}

func benchFiles(ctx context.Context, e *env, sb client.Sandbox, _ int) error {
	e.p.step("64 MiB file write and read")
	w, r, err := fileRates(ctx, e.c, sb.ID, "/root/bench.bin")
	if err != nil {
		return err
	}
	e.t.rate("64 MiB file write (API → guest disk, fsynced)", w, "raw channel in", e.fl.inMiBs, "≥ 0.7× floor", ms(time.Duration(64/w*float64(time.Second))))
	e.t.rate("64 MiB file read (guest → API)", r, "raw channel out", e.fl.outMiBs, "≥ 0.7× floor", ms(time.Duration(64/r*float64(time.Second))))
	return guestFileIO(ctx, e, sb.ID, "/root/bench.bin", w, r)
}

// guestFileIO times, inside the guest, what a transfer asks of the guest
// besides the channel: writing the 64 MiB file to its disk, fsynced, and
// reading it from its page cache. On one vCPU that work and the channel's
// take turns, so the two times added are the transfer's floor: its
// figures are put beside it.
func guestFileIO(ctx context.Context, e *env, id, path string, w, r float64) error {
	e.p.step("the guest's own file I/O (3 rounds)")
	script := `for i in 1 2 3; do
s=$(date +%s%N); cp ` + path + ` ` + path + `.copy; sync ` + path + `.copy; m=$(date +%s%N)
cat ` + path + ` > /dev/null; x=$(date +%s%N); rm -f ` + path + `.copy
echo $((m - s)) $((x - m)); done`
	res, err := e.c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", script}})
	if err != nil {
		return err
	}
	var wr, rd []time.Duration
	f := strings.Fields(res.Stdout)
	for i := 0; i+1 < len(f); i += 2 {
		a, err1 := strconv.ParseInt(f[i], 10, 64)
		b, err2 := strconv.ParseInt(f[i+1], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("guest file I/O: %q (stderr %q)", res.Stdout, res.Stderr)
		}
		wr, rd = append(wr, time.Duration(a)), append(rd, time.Duration(b))
	}
	if len(wr) == 0 {
		return fmt.Errorf("guest file I/O: no times in %q (stderr %q)", res.Stdout, res.Stderr)
	}
	disk, cache := 64/pct(wr, 0.5).Seconds(), 64/pct(rd, 0.5).Seconds()
	e.t.rate("  the guest alone: 64 MiB copied on its disk, fsynced (cp, sync), p50 of 3", disk, "", 0, "", "no channel")
	e.t.rate("  the guest alone: 64 MiB read from its page cache (cat), p50 of 3", cache, "", 0, "", "no channel")
	serial := func(a, b float64) float64 { return 1 / (1/a + 1/b) }
	e.t.rate("  file write beside raw channel in + the guest's disk write", w, "channel + disk", serial(e.fl.inMiBs, disk), "",
		"the vCPU does both in turn")
	e.t.rate("  file read beside the guest's cache read + raw channel out", r, "cache + channel", serial(cache, e.fl.outMiBs), "",
		"the vCPU does both in turn")
	return nil
}

// fileRates writes 64 MiB of random bytes to path in sandbox id through
// the API, reads it back, and returns both rates in MiB/s.
func fileRates(ctx context.Context, c *client.Client, id, path string) (w, r float64, err error) {
	data := make([]byte, 64<<20)
	rand.Read(data)
	start := time.Now()
	if err := c.WriteFile(ctx, id, path, 0o644, bytes.NewReader(data)); err != nil {
		return 0, 0, err
	}
	w = 64 / time.Since(start).Seconds()
	start = time.Now()
	if err := c.ReadFile(ctx, id, path, io.Discard); err != nil {
		return 0, 0, err
	}
	return w, 64 / time.Since(start).Seconds(), nil
}

func benchIdle(ctx context.Context, e *env, sb client.Sandbox, _ int) error {
	e.p.step("idle CPU of one sandbox (12 s)")
	t := e.t
	const window = 10 * time.Second
	time.Sleep(2 * time.Second) // let the last transfer settle
	before, err := cpuTicks(sb.VMPID)
	if err != nil {
		return err
	}
	time.Sleep(window)
	after, err := cpuTicks(sb.VMPID)
	if err != nil {
		return err
	}
	const hz = 100 // USER_HZ
	used := float64(after-before) / hz
	t.add("host CPU of one idle sandbox over 10 s", fmt.Sprintf("%.1f %% of a core", 100*used/window.Seconds()), fmt.Sprintf("%.2f CPU-s", used))
	return nil
}

// cpuTicks is utime+stime of pid in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st, nil
}
