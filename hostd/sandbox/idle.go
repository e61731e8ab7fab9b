package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultIdleCPU is the guest CPU use (in CPUs, measured on the VMM's
// cgroup) under which a sandbox counts as idle.
const DefaultIdleCPU = 0.15

// watchIdle pauses b with pause once it has been idle for its idle
// timeout: no API call, no exec running, and its VMM's CPU use under
// threshold (in CPUs).
func (b *runningVM) watchIdle(threshold float64, pause func(ctx context.Context, id string) (Info, error)) {
	idle := time.Duration(b.limits.IdleTimeoutS) * time.Second
	if idle <= 0 {
		return
	}
	tick := min(max(idle/4, 200*time.Millisecond), 5*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	lastCPU, lastAt := b.cpu(), time.Now()
	for {
		select {
		case <-b.gone:
			return
		case <-t.C:
		}
		cpu, now := b.cpu(), time.Now()
		rate := (cpu - lastCPU) / now.Sub(lastAt).Seconds()
		lastCPU, lastAt = cpu, now
		if b.execs.Load() > 0 || rate >= threshold {
			b.touch()
			continue
		}
		if now.Sub(time.Unix(0, b.last.Load())) < idle {
			continue
		}
		b.log.Info("sandbox idle; pausing", "sandbox_id", b.id, "idle_timeout_s", b.limits.IdleTimeoutS, "cpu", rate)
		if _, err := pause(context.Background(), b.id); err != nil && !errors.Is(err, ErrNotRunning) {
			b.log.Error("idle pause", "sandbox_id", b.id, "err", err)
			b.touch()
			continue
		}
		return
	}
}

// running returns sandbox id's live box, resuming it first if it is paused
// (auto-resume: the next exec or file call brings a paused sandbox back).
func (m *Manager) running(ctx context.Context, id string) (*runningVM, error) {
	b, err := m.live(ctx, id)
	if err == nil || !errors.Is(err, ErrNotRunning) {
		if b != nil {
			b.touch()
		}
		return b, err
	}
	rec, gerr := m.opts.Store.GetSandbox(ctx, id)
	if gerr != nil || State(rec.State) != StatePaused {
		return nil, err
	}
	m.log.Info("auto-resuming paused sandbox", "sandbox_id", id)
	// Resume runs one at a time; one that lost a race with another
	// fails, and the sandbox is then running.
	_, rerr := m.Resume(ctx, id)
	b, err = m.live(ctx, id)
	if err != nil {
		if rerr != nil {
			return nil, fmt.Errorf("sandbox: auto-resume: %w", rerr)
		}
		return nil, err
	}
	b.touch()
	return b, nil
}
