package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"
)

// Recover runs once at start. A sandbox that was creating, running or
// stopping when the previous hostd ended has lost its VM (VMM processes die
// with the hostd that started them: the policy of vmm.StartProcess, which
// both backends use), so it is marked failed and its files
// are removed. Directories under sandboxes/ that no record names are
// orphans and are removed too.
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
		case StateCreating, StateRunning, StateStopping, StatePausing, StateResuming:
			m.log.Warn("sandbox lost its vm when hostd stopped", "sandbox_id", r.ID, "vm_pid", r.VMPID)
			removeDir(r.Dir, m.log.With("sandbox_id", r.ID))
			if err := m.setState(ctx, r.ID, StateFailed, "hostd restarted; the vm is gone", 0); err != nil {
				return err
			}
		}
	}
	m.ReapOnce(ctx) // cgroups left by a previous hostd of this instance
	if err := m.snaps.Sweep(ctx); err != nil {
		return err
	}
	defer m.startPools(ctx)
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
	m.stopPools()
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
