package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

// benchDensity starts n sandboxes from one template (a snapshot of a
// booted sandbox), checks that each answers an exec, reports host memory
// per sandbox, hostd's own RSS and the exec p50/p99 across them, then
// removes them all. It stops starting sandboxes at the deadline.
func benchDensity(ctx context.Context, e *env, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	e.p.step(fmt.Sprintf("density: admission at %dx memory and %d vCPUs per CPU (hostd's defaults, 2x and 32, admit 64 one-vCPU sandboxes on 2 CPUs, and about 96 of 512 MiB on 24 GiB)",
		densityMemOvercommit, densityVCPUOvercommit))
	e.p.step("density: template")
	src, err := e.c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		return err
	}
	sn, err := e.c.Snapshot(ctx, src.ID, client.SnapshotRequest{})
	if err != nil {
		return err
	}
	if err := e.c.DeleteSandbox(ctx, src.ID); err != nil {
		return err
	}
	if _, err := e.c.CreateTemplate(ctx, client.CreateTemplateRequest{Name: "density", SnapshotID: sn.ID}); err != nil {
		return err
	}
	defer e.c.DeleteTemplate(context.WithoutCancel(ctx), "density")
	var sbs []client.Sandbox
	fds0, gor0, heap0 := procFDs(), runtime.NumGoroutine(), heapInUse()
	deleted := false
	del := func() {
		if deleted {
			return
		}
		deleted = true
		e.p.step(fmt.Sprintf("density: deleting %d sandboxes", len(sbs)))
		for _, sb := range sbs {
			_ = e.c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
		}
	}
	defer del()
	errs := 0
	start := time.Now()
	for i := range n {
		if time.Now().After(deadline) {
			e.p.step(fmt.Sprintf("density: deadline after %d sandboxes", i))
			break
		}
		if i%5 == 0 {
			e.p.step(fmt.Sprintf("density: sandbox %d/%d", i+1, n))
		}
		sb, err := e.c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "density"})
		if err != nil {
			errs++
			continue
		}
		sbs = append(sbs, sb)
	}
	started := time.Since(start)
	e.p.step("density: an exec in each")
	var d []time.Duration
	for _, sb := range sbs {
		t0 := time.Now()
		r, err := e.c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
		if err != nil || r.ExitCode != 0 {
			errs++
			continue
		}
		d = append(d, time.Since(t0))
	}
	var sum int64
	for _, sb := range sbs {
		if p, err := pss(sb.VMPID); err == nil {
			sum += p
		}
	}
	if len(sbs) == 0 || len(d) == 0 {
		return fmt.Errorf("density: no sandbox answered (%d errors)", errs)
	}
	e.t.add("density: sandboxes from one template, running and answering", fmt.Sprintf("%d of %d", len(d), n),
		fmt.Sprintf("%d errors, started in %s", errs, ms(started)))
	e.t.add("density: host memory per sandbox (PSS)", fmt.Sprintf("%.1f MiB", float64(sum)/float64(len(sbs))/(1<<20)), "")
	e.t.add("density: hostd's own RSS", fmt.Sprintf("%.1f MiB", float64(selfRSS())/(1<<20)), "the bench process, hostd in it")
	e.t.dur(fmt.Sprintf("density: exec `true` across %d sandboxes, p50", len(d)), pct(d, 0.5), "", 0, "", "p99 "+ms(pct(d, 0.99)))
	k := float64(len(sbs))
	e.t.add("density: per sandbox, hostd heap / goroutines / fds",
		fmt.Sprintf("%.1f MiB / %.1f / %.1f", float64(heapInUse()-heap0)/k/(1<<20), float64(runtime.NumGoroutine()-gor0)/k, float64(procFDs()-fds0)/k), "in-process hostd, after the execs")
	del()
	left := fmt.Sprintf("fds %+d, goroutines %+d", procFDs()-fds0, runtime.NumGoroutine()-gor0)
	e.t.add("density: left after removing them all", left, "against before the first create")
	return nil
}

// selfRSS is this process's resident set in bytes.
func selfRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// procFDs is how many fds this process (hostd in it) holds.
func procFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// heapInUse is the Go heap in use, in bytes.
func heapInUse() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
