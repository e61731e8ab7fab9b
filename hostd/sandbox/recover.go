package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
)

// Recover runs once at start. VMM processes outlive hostd
// (vmm.StartProcess), so a sandbox that was running when the previous hostd
// ended is re-adopted if its VMM still runs (found by the pid and start
// time in its state file, and its cgroup; readopt), and marked failed with
// the reason, its files kept until it is deleted, if the VMM is gone. A
// sandbox caught pausing or resuming whose saved state is complete on disk
// goes back to paused, resumable (recoverPaused); one whose VMM still runs
// the guest is re-adopted. A VMM that no running sandbox owns (its sandbox
// is paused, failed, half-made or half-deleted, or has no record at all) is
// stopped by its pid and start time, never by its name. Directories under
// sandboxes/ that no record names are orphans and are removed.
func (m *Manager) Recover(ctx context.Context) error {
	recs, err := m.opts.Store.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
		if err := m.recoverOne(ctx, r); err != nil {
			return err
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
			dir := filepath.Join(m.opts.DataDir, "sandboxes", e.Name())
			m.vmms.kill(e.Name(), dir)
			removeDir(dir, m.log)
		}
	}
	return m.nets.sweep()
}

// recoverOne brings sandbox r's record in line with what runs (Recover).
func (m *Manager) recoverOne(ctx context.Context, r store.Sandbox) error {
	log := m.log.With("sandbox_id", r.ID)
	p, alive := m.vmms.recorded(r.ID, r.Dir)
	st := State(r.State)
	switch st {
	case StatePaused, StateFailed:
		if alive {
			m.vmms.kill(r.ID, r.Dir)
		}
		if st == StatePaused {
			m.ttls.rearm(r)
			m.reg.get(r.ID).markEarlierExecs()
		}
		return nil
	case StatePausing, StateResuming:
		if m.recoverPaused(ctx, r) {
			if alive {
				m.vmms.kill(r.ID, r.Dir)
			}
			if err := m.setState(ctx, r.ID, StatePaused, "", 0); err != nil {
				return err
			}
			m.reg.get(r.ID).markEarlierExecs()
			log.Warn("sandbox was pausing or resuming when hostd stopped; its saved state is intact: paused")
			m.ttls.rearm(r)
			return nil
		}
	case StateCreating, StateStopping:
		if alive {
			m.vmms.kill(r.ID, r.Dir)
		}
		log.Warn("sandbox was being created or deleted when hostd stopped")
		removeDir(r.Dir, log)
		return m.setState(ctx, r.ID, StateFailed, "hostd stopped while the sandbox was "+string(st), 0)
	case StateRunning:
	default:
		return nil
	}
	why := fmt.Sprintf("hostd restarted; the vm (pid %d) is gone", p.PID)
	if alive {
		r.State = string(StateRunning)
		err := m.readopt(ctx, r, p)
		if err == nil {
			return nil
		}
		m.vmms.kill(r.ID, r.Dir)
		m.nets.detach(r.ID)
		if !errors.Is(err, vmm.ErrNotRunning) {
			log.Error("could not re-adopt the sandbox's vm; stopped it", "vm_pid", p.PID, "err", err)
			why = "hostd restarted; re-adopting the vm failed: " + err.Error()
		}
	}
	log.Warn("sandbox lost its vm when hostd stopped", "vm_pid", p.PID)
	_ = os.Remove(filepath.Join(r.Dir, vmStateFile))
	return m.setState(ctx, r.ID, StateFailed, why, 0)
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

// Close stops every live sandbox, marks them failed (the VMs do not run
// on: Release is the close that leaves them for the next hostd), and waits
// for the manager's background work (watchers, pool refills, timers,
// snapshot manifests) to end.
func (m *Manager) Close(ctx context.Context) error {
	m.stopAccepting()
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
