package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
)

// Pause saves a running sandbox's memory and device state to disk and ends
// its VM, releasing the host memory. Resume brings it back.
func (m *Manager) Pause(ctx context.Context, id string) (Info, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return Info{}, err
	}
	b.op.Lock()
	defer b.op.Unlock()
	if err := m.setState(ctx, id, StatePausing, "", b.vm.PID()); err != nil {
		return Info{}, err
	}
	dir := filepath.Join(b.dir, "paused")
	m.rec.drainGuest(ctx, b)
	err = m.savePaused(ctx, b, dir)
	if err != nil {
		os.RemoveAll(dir)
		_ = os.Remove(filepath.Join(b.dir, durableFile))
		_ = m.setState(context.WithoutCancel(ctx), id, StateRunning, "", b.vm.PID())
		_ = b.vm.Resume(context.WithoutCancel(ctx))
		return Info{}, fmt.Errorf("sandbox: pause %s: %w", id, err)
	}
	fault.Point("pause:saved")
	// The VM ends on purpose: take it out of the live set first, so the
	// watcher does not count it as a crash.
	m.reg.forget(b)
	b.end(fmt.Errorf("%w: sandbox %s", ErrPaused, id))
	b.closeAgent()
	if err := b.vm.Stop(context.WithoutCancel(ctx)); err != nil {
		m.log.Error("stop paused vm", "sandbox_id", id, "err", err)
	}
	b.settle()
	b.removeCgroup()
	_ = os.Remove(filepath.Join(b.dir, vmStateFile))
	m.nets.dropReattached(id)
	if err := m.setState(ctx, id, StatePaused, "", 0); err != nil {
		return Info{}, err
	}
	m.log.Info("sandbox paused", "sandbox_id", id)
	return m.Get(ctx, id)
}

// savePaused saves b's VM to dir (snapshot.SavePaused) and records it
// paused there.
func (m *Manager) savePaused(ctx context.Context, b *runningVM, dir string) error {
	c, err := b.client(ctx)
	if err != nil {
		return err
	}
	if err := snapshot.SavePaused(ctx, b.vm, c, dir); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(b.dir, durableFile))
	if m.port != nil {
		// Durable before it is answered: a store that fails fails the
		// pause, and the VM resumes (Pause).
		d, err := m.exportPaused(ctx, b, dir)
		if err != nil {
			return err
		}
		if err := writeDurable(b.dir, d); err != nil {
			return err
		}
		if m.opts.Durability != nil {
			if err := m.opts.Durability.SetDurable(ctx, b.id, d.Manifest, d.At); err != nil {
				m.log.Warn("durable pause not recorded in the fleet", "sandbox_id", b.id, "err", err)
			}
		}
	}
	return m.opts.Store.PutSandboxVM(ctx, store.SandboxVM{ID: b.id, SnapshotID: b.snapshotID, Overlay: b.overlay, PauseDir: dir, Cwd: b.cwd, User: b.user})
}

// Resume restarts a paused sandbox from its saved state: same disk, same
// processes, a fresh clock and entropy.
func (m *Manager) Resume(ctx context.Context, id string) (Info, error) {
	rec, err := m.opts.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) && m.port != nil {
		// Paused on another host: import it from the snapshot store.
		if err = m.importSandbox(ctx, id); err != nil {
			return Info{}, err
		}
		rec, err = m.opts.Store.GetSandbox(ctx, id)
	}
	if err != nil {
		return Info{}, notFound(err, id)
	}
	// One resume of a sandbox at a time: a second caller finds it running.
	e := m.reg.get(id)
	e.resume.Lock()
	defer e.resume.Unlock()
	rec, err = m.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return Info{}, notFound(err, id)
	}
	if State(rec.State) != StatePaused {
		return Info{}, fmt.Errorf("%w: sandbox %s is %s, not paused", ErrNotRunning, id, rec.State)
	}
	v, err := m.opts.Store.GetSandboxVM(ctx, id)
	if err != nil {
		return Info{}, err
	}
	if err := m.setState(ctx, id, StateResuming, "", 0); err != nil {
		return Info{}, err
	}
	dur, wasDurable := readDurable(rec.Dir)
	b := m.newBox(ctx, rec)
	b.overlay, b.snapshotID, b.cwd, b.user = v.Overlay, v.SnapshotID, v.Cwd, v.User
	b.disks = countOverlays(rec.Dir)
	if err := m.nets.ensure(ctx, id); err != nil {
		_ = m.setState(context.WithoutCancel(ctx), id, StatePaused, "", 0)
		return Info{}, fmt.Errorf("sandbox: resume %s: %w", id, err)
	}
	defer m.opts.Metrics.Since("resume", time.Now())
	cfg, err := m.vmms.place(m.vmConfig(rec, v.Overlay), b)
	var vm vmm.VM
	if err == nil {
		vm, err = m.opts.Driver.Restore(ctx, cfg, v.PauseDir)
	}
	if err == nil {
		b.vm = vm
		fault.Point("resume:restored")
		// From the moment the guest runs, its disk moves on from the saved
		// memory: the record stops naming the paused state first, so a
		// hostd that dies from here on does not bring that state back
		// (Recover; until here a crash leaves the sandbox paused).
		err = m.forgetPaused(ctx, v)
	}
	if err == nil {
		fault.Point("resume:forgotten")
		err = m.wake(ctx, b, false)
	}
	if err == nil {
		err = m.resumeMounts(ctx, b, rec.Dir)
	}
	if err != nil {
		if b.vm != nil {
			_ = b.vm.Stop(context.WithoutCancel(ctx)) // ended already if wake failed
		}
		b.removeCgroup()
		_ = m.opts.Store.PutSandboxVM(context.WithoutCancel(ctx), v)
		if wasDurable {
			_ = writeDurable(rec.Dir, dur)
		}
		_ = m.setState(context.WithoutCancel(ctx), id, StatePaused, "", 0)
		return Info{}, fmt.Errorf("sandbox: resume %s: %w", id, err)
	}
	// The restored VM maps the saved memory privately; removing the
	// directory cannot change what it sees.
	os.RemoveAll(v.PauseDir)
	m.log.Info("sandbox resumed", "sandbox_id", id)
	info, err := m.adopt(ctx, b, rec, false)
	if err == nil && m.reg.get(id).takeEarlierExecs() {
		m.takeover.run(ctx, b) // paused across a hostd restart
	}
	return info, err
}

// forgetPaused records sandbox VM v without its paused state.
func (m *Manager) forgetPaused(ctx context.Context, v store.SandboxVM) error {
	if rec, err := m.opts.Store.GetSandbox(ctx, v.ID); err == nil {
		_ = os.Remove(filepath.Join(rec.Dir, durableFile)) // it runs: no longer what the store holds
	}
	v.PauseDir = ""
	return m.opts.Store.PutSandboxVM(ctx, v)
}

func countOverlays(dir string) int {
	ms, _ := filepath.Glob(filepath.Join(dir, "disk-*.qcow2"))
	return len(ms) + 1
}

// notFound names sandbox id in a store's ErrNotFound.
func notFound(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return err
}

func snapshotNotFound(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	return err
}

// ReleaseSandbox forgets a paused sandbox whose state is durable in the snapshot
// store, after it moved to another host: its local files and records go,
// the store's refs and manifests stay.
func (m *Manager) ReleaseSandbox(ctx context.Context, id string) error {
	info, err := m.Get(ctx, id)
	if err != nil {
		return err
	}
	if info.State != StatePaused || !info.Durable {
		return fmt.Errorf("%w: sandbox %s is %s", ErrNotDurable, id, info.State)
	}
	return m.delete(ctx, id, false)
}
