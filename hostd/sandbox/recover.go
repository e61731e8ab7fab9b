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
			m.removeDir(r.Dir, m.log.With("sandbox_id", r.ID))
			if err := m.setState(ctx, r.ID, StateFailed, "hostd restarted; the vm is gone", 0); err != nil {
				return err
			}
		}
	}
	m.ReapOnce(ctx) // cgroups left by a previous hostd of this instance
	if err := m.sweepSnapshots(ctx); err != nil {
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
			m.removeDir(filepath.Join(m.opts.DataDir, "sandboxes", e.Name()), m.log)
		}
	}
	return m.sweepNetwork()
}

// sweepSnapshots removes snapshot directories that no record names (a
// capture that hostd did not finish).
func (m *Manager) sweepSnapshots(ctx context.Context) error {
	sns, err := m.opts.Store.ListSnapshots(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, sn := range sns {
		known[filepath.Base(sn.Dir)] = true
	}
	ents, err := os.ReadDir(filepath.Join(m.opts.DataDir, "snapshots"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range ents {
		if !known[e.Name()] {
			m.log.Warn("removing orphaned snapshot dir", "snapshot_id", e.Name())
			os.RemoveAll(filepath.Join(m.opts.DataDir, "snapshots", e.Name()))
		}
	}
	return nil
}

// Close stops every live sandbox (their VMs could not outlive hostd) and
// marks them failed.
func (m *Manager) Close(ctx context.Context) error {
	m.closing.Store(true)
	m.stopTTLs()
	m.stopPools()
	m.mu.Lock()
	boxes := make([]*box, 0, len(m.boxes))
	for id, b := range m.boxes {
		boxes = append(boxes, b)
		delete(m.boxes, id)
	}
	m.mu.Unlock()
	var errs []error
	for _, b := range boxes {
		m.teardown(b, errors.New("sandbox: hostd stopped"))
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		errs = append(errs, m.setState(sctx, b.id, StateFailed, "hostd stopped", 0))
		cancel()
	}
	return errors.Join(errs...)
}
