package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

// snapshotBench measures restore, fork, warm claim, 10 forks, fork memory
// and pause/resume, each against the cold boot measured in the same run.
type snapshotBench struct {
	c    *client.Client
	t    *table
	cold time.Duration
	e    *env
}

func (s *snapshotBench) ratio(d time.Duration) string {
	return fmt.Sprintf("%.3f × cold boot", float64(d)/float64(s.cold))
}

func benchSnapshots(ctx context.Context, e *env, cold time.Duration) error {
	c, t := e.c, e.t
	s := &snapshotBench{c: c, t: t, cold: cold, e: e}
	e.p.step("snapshots: source sandbox and snapshot")
	src, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		return err
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), src.ID)
	sn, err := c.Snapshot(ctx, src.ID, client.SnapshotRequest{})
	if err != nil {
		return err
	}
	steps := []func(context.Context, client.Sandbox, client.Snapshot) error{s.restore, s.fork, s.warm, s.tenForks, s.pauseResume}
	for _, step := range steps {
		if err := step(ctx, src, sn); err != nil {
			// A failed step (say QEMUs that did not start in time on a
			// loaded machine) is reported; the others still run.
			t.add("(failed step)", "—", strings.SplitN(err.Error(), "\n", 2)[0])
			e.p.step("step failed: " + err.Error())
		}
	}
	return nil
}

// timed runs fn n times (deleting what it creates) and returns the p50.
func (s *snapshotBench) timed(n int, fn func() ([]string, error)) (time.Duration, error) {
	var d []time.Duration
	for range n {
		start := time.Now()
		ids, err := fn()
		if err != nil {
			return 0, err
		}
		d = append(d, time.Since(start))
		for _, id := range ids {
			if err := s.c.DeleteSandbox(context.Background(), id); err != nil {
				return 0, err
			}
		}
	}
	return pct(d, 0.5), nil
}

func (s *snapshotBench) restore(ctx context.Context, _ client.Sandbox, sn client.Snapshot) error {
	s.e.p.step("restore a snapshot (5)")
	s.e.ph.take()
	p50, err := s.timed(5, func() ([]string, error) {
		sb, err := s.c.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: sn.ID})
		return []string{sb.ID}, err
	})
	if err != nil {
		return err
	}
	s.e.emu["restore"] = p50
	s.t.dur("restore a snapshot → agent ready, p50 of 5", p50, "bare restore", s.e.fl.restore, "≤ 1.5× floor", s.ratio(p50))
	s.t.addPhases("restore", s.e.ph)
	return nil
}

func (s *snapshotBench) fork(ctx context.Context, src client.Sandbox, _ client.Snapshot) error {
	s.e.p.step("fork 1 (3)")
	s.e.ph.take()
	p50, err := s.timed(3, func() ([]string, error) {
		forks, err := s.c.Fork(ctx, src.ID, 1)
		return ids(forks), err
	})
	if err != nil {
		return err
	}
	s.e.emu["fork"] = p50
	s.t.dur("fork 1 from a running sandbox (capture + restore), p50 of 3", p50, "bare clone", s.e.fl.clone, "≤ 2× floor", s.ratio(p50))
	s.t.addPhases("fork", s.e.ph)
	return nil
}

func (s *snapshotBench) warm(ctx context.Context, _ client.Sandbox, sn client.Snapshot) error {
	s.e.p.step("template warm-pool claims (3)")
	if _, err := s.c.CreateTemplate(ctx, client.CreateTemplateRequest{Name: "bench", SnapshotID: sn.ID, PoolSize: 1}); err != nil {
		return err
	}
	defer s.c.DeleteTemplate(context.WithoutCancel(ctx), "bench")
	var d []time.Duration
	for range 3 {
		if err := s.waitWarm(ctx, "bench"); err != nil {
			return err
		}
		s.e.ph.take()
		start := time.Now()
		sb, err := s.c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "bench"})
		if err == nil {
			_, err = s.c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
		}
		if err != nil {
			return err
		}
		d = append(d, time.Since(start))
		if err := s.c.DeleteSandbox(ctx, sb.ID); err != nil {
			return err
		}
	}
	p50 := pct(d, 0.5)
	s.t.dur("warm-pool claim (template) → first exec done, p50 of 3", p50, "", 0, "≤ 100 ms", s.ratio(p50))
	return nil
}

func (s *snapshotBench) waitWarm(ctx context.Context, name string) error {
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		tpl, err := s.c.GetTemplate(ctx, name)
		if err != nil {
			return err
		}
		if tpl.PoolReady > 0 {
			return nil
		}
	}
	return fmt.Errorf("warm pool of %s did not fill", name)
}

func (s *snapshotBench) tenForks(ctx context.Context, src client.Sandbox, _ client.Snapshot) error {
	s.e.p.step("10 forks and their memory")
	start := time.Now()
	forks, err := s.c.Fork(ctx, src.ID, 10)
	if err != nil {
		return err
	}
	wall := time.Since(start)
	defer func() {
		for _, f := range forks {
			s.c.DeleteSandbox(context.WithoutCancel(ctx), f.ID)
		}
	}()
	s.t.dur("10 forks, total wall time", wall, "one cold boot", s.cold, "≤ 1.0× floor", "")
	for _, f := range forks {
		if _, err := s.c.Exec(ctx, f.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
			return err
		}
	}
	cold, err := s.c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512, Boot: client.CreateSandboxRequestBootCold})
	if err != nil {
		return err
	}
	defer s.c.DeleteSandbox(context.WithoutCancel(ctx), cold.ID)
	if _, err := s.c.Exec(ctx, cold.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
		return err
	}
	pids := make([]int, len(forks))
	for i, f := range forks {
		pids[i] = f.VMPID
	}
	by, err := marginalPSS(pids)
	if err != nil {
		return err
	}
	coldBy, err := pssOf(cold.VMPID)
	if err != nil {
		return err
	}
	marginal, coldPSS := by[pssTotal], float64(coldBy[pssTotal])
	s.t.figs = append(s.t.figs, figure{Name: "marginal host memory per extra fork (PSS, 10 forks)", Value: marginal / (1 << 20), Unit: "MiB",
		Text: fmt.Sprintf("%.1f MiB", marginal/(1<<20)), FloorName: "a cold-booted sandbox's PSS", FloorValue: coldPSS / (1 << 20),
		Ratio: marginal / coldPSS, Goal: "≤ 0.12× floor"})
	for _, k := range pssKinds {
		note := fmt.Sprintf("the cold-booted sandbox: %.1f MiB", float64(coldBy[k])/(1<<20))
		if c, ok := s.e.fl.clonePSS[k+privateSuffix]; ok {
			note += fmt.Sprintf("; private pages: %.1f MiB, a bare clone's %.1f MiB", by[k+privateSuffix]/(1<<20), float64(c)/(1<<20))
		}
		s.t.figs = append(s.t.figs, figure{Name: "  per extra fork: " + k, Value: by[k] / (1 << 20), Unit: "MiB",
			Text: fmt.Sprintf("%.1f MiB", by[k]/(1<<20)), Note: note})
	}
	return nil
}

func (s *snapshotBench) pauseResume(ctx context.Context, src client.Sandbox, _ client.Snapshot) error {
	s.e.p.step("pause and resume")
	gib := float64(src.MemoryMiB) / 1024
	start := time.Now()
	if _, err := s.c.Pause(ctx, src.ID); err != nil {
		return err
	}
	pause := time.Since(start)
	start = time.Now()
	if _, err := s.c.Resume(ctx, src.ID); err != nil {
		return err
	}
	resume := time.Since(start)
	s.t.add("pause (memory to disk, VM ends), per GiB of guest memory", fmt.Sprintf("%.0f ms/GiB", float64(pause.Milliseconds())/gib), ms(pause)+" for "+strconv.Itoa(src.MemoryMiB)+" MiB")
	s.t.add("resume (restore from disk), per GiB of guest memory", fmt.Sprintf("%.0f ms/GiB", float64(resume.Milliseconds())/gib), ms(resume)+" for "+strconv.Itoa(src.MemoryMiB)+" MiB")
	return nil
}

func ids(sbs []client.Sandbox) []string {
	out := make([]string, 0, len(sbs))
	for _, s := range sbs {
		out = append(out, s.ID)
	}
	return out
}
