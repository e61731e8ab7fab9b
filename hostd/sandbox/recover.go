package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/hostd/store"
)

// Recover runs once at start. A sandbox that was creating, running or
// stopping when the previous hostd ended has lost its VM (VMM processes die
// with the hostd that started them: the policy of vmm.StartProcess, which
// both backends use), so it is marked failed; a running one keeps its files
// until it is deleted (a half-made or half-deleted one does not). A sandbox
// caught pausing or resuming whose saved state is complete on disk goes
// back to paused, resumable (recoverPaused). Directories under sandboxes/
// that no record names are orphans and are removed.
func (m *Manager) Recover(ctx context.Context) error {
	recs, err := m.opts.Store.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
		switch State(r.State) {
		case StatePaused:
			m.rearmTTL(r)
		case StatePausing, StateResuming:
			if m.recoverPaused(ctx, r) {
				if err := m.setState(ctx, r.ID, StatePaused, "", 0); err != nil {
					return err
				}
				m.log.Warn("sandbox was pausing or resuming when hostd stopped; its saved state is intact: paused", "sandbox_id", r.ID)
				m.rearmTTL(r)
				continue
			}
			fallthrough
		case StateCreating, StateRunning, StateStopping:
			m.log.Warn("sandbox lost its vm when hostd stopped", "sandbox_id", r.ID, "vm_pid", r.VMPID)
			if s := State(r.State); s == StateCreating || s == StateStopping {
				removeDir(r.Dir, m.log.With("sandbox_id", r.ID))
			}
			if err := m.setState(ctx, r.ID, StateFailed, "hostd restarted; the vm is gone", 0); err != nil {
				return err
			}
		}
	}
	m.ReapOnce(ctx) // cgroups left by a previous hostd of this instance
	if err := m.snaps.Sweep(ctx); err != nil {
		return err
	}
	defer m.warm.startPools(ctx)
	ents, err := os.ReadDir(filepath.Join(m.opts.DataDir, "sandboxes"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range ents {
		if !known[e.Name()] {
			m.log.Warn("removing orphaned sandbox dir", "sandbox_id", e.Name())
			removeDir(filepath.Join(m.opts.DataDir, "sandboxes", e.Name()), m.log)
		}
	}
	return m.nets.sweep()
}

// recoverPaused reports whether sandbox r, found pausing or resuming, has a
// complete saved state: Pause records the state's directory only once the
// VMM has written it, and a running sandbox's record names none (adopt
// clears it), so a named directory that is still there and not empty is a
// whole paused state.
func (m *Manager) recoverPaused(ctx context.Context, r store.Sandbox) bool {
	v, err := m.opts.Store.GetSandboxVM(ctx, r.ID)
	if err != nil || v.PauseDir == "" || v.Overlay == "" {
		return false
	}
	if _, err := os.Stat(v.Overlay); err != nil {
		return false
	}
	ents, err := os.ReadDir(v.PauseDir)
	return err == nil && len(ents) > 0
}

// Close stops every live sandbox (their VMs could not outlive hostd),
// marks them failed, and waits for the manager's background work (watchers,
// pool refills, timers, snapshot manifests) to end.
func (m *Manager) Close(ctx context.Context) error {
	m.bgMu.Lock()
	m.closed = true
	m.bgMu.Unlock()
	for _, e := range m.reg.entries() {
		e.stopTimers()
	}
	m.warm.stopPools()
	var errs []error
	for _, b := range m.reg.boxes() {
		if !m.reg.forget(b) {
			continue
		}
		m.teardown(b, errors.New("sandbox: hostd stopped"))
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		errs = append(errs, m.setState(sctx, b.id, StateFailed, "hostd stopped", 0))
		cancel()
	}
	m.bg.Wait()
	m.snaps.Close()
	return errors.Join(errs...)
}
