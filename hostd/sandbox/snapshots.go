package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
)

// snapshotStore is the persistence of snapshots and templates.
type snapshotStore interface {
	PutSandboxVM(ctx context.Context, v store.SandboxVM) error
	GetSandboxVM(ctx context.Context, id string) (store.SandboxVM, error)
	DeleteSandboxVM(ctx context.Context, id string) error
	PutSnapshot(ctx context.Context, sn store.Snapshot) error
	GetSnapshot(ctx context.Context, id string) (store.Snapshot, error)
	FindSnapshotByKey(ctx context.Context, key string) (store.Snapshot, error)
	ListSnapshots(ctx context.Context) ([]store.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	SnapshotUsers(ctx context.Context, id string) ([]string, error)
	PutTemplate(ctx context.Context, t store.Template) error
	GetTemplate(ctx context.Context, name string) (store.Template, error)
	ListTemplates(ctx context.Context) ([]store.Template, error)
	DeleteTemplate(ctx context.Context, name string) error
}

// layerFile is a snapshot's frozen disk layer, in its directory.
const layerFile = "disk.qcow2"

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (m *Manager) snapshotDir(id string) string {
	return filepath.Join(m.opts.DataDir, "snapshots", id)
}

// Snapshot captures a running sandbox: its filesystems are flushed through
// the agent, the VM is paused, its disk overlay becomes the snapshot's
// read-only layer under a fresh overlay, and its device state and memory
// are saved. The sandbox then resumes unless asked to stay paused.
func (m *Manager) Snapshot(ctx context.Context, id string, opts SnapshotOptions) (SnapshotInfo, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return SnapshotInfo{}, err
	}
	b.op.Lock()
	defer b.op.Unlock()
	if opts.Kind == "" {
		opts.Kind = "snapshot"
	}
	c, err := m.agent(ctx, b)
	if err != nil {
		return SnapshotInfo{}, m.streamErr(b, err)
	}
	// A flush barrier: freeze writes everything out, thaw at once, so the
	// saved memory holds no frozen filesystem.
	if err := errors.Join(c.Freeze(ctx), c.Thaw(ctx)); err != nil {
		return SnapshotInfo{}, fmt.Errorf("sandbox: flush guest filesystems: %w", err)
	}
	m.drainGuest(ctx, b)
	if err := b.vm.Pause(ctx); err != nil {
		return SnapshotInfo{}, m.streamErr(b, err)
	}
	sn, err := m.capture(ctx, b, opts)
	if !opts.StayPaused {
		err = errors.Join(err, b.vm.Resume(context.WithoutCancel(ctx)))
	}
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("sandbox: snapshot %s: %w", id, err)
	}
	m.log.Info("snapshot taken", "sandbox_id", id, "snapshot_id", sn.ID, "kind", sn.Kind, "size", sn.SizeBytes)
	m.recordLifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionSnapshot, SnapshotID: sn.ID, Reason: sn.Kind})
	return m.snapshotInfo(ctx, sn)
}

// capture writes the snapshot of paused box b.
func (m *Manager) capture(ctx context.Context, b *box, opts SnapshotOptions) (store.Snapshot, error) {
	rec, err := m.opts.Store.GetSandbox(ctx, b.id)
	if err != nil {
		return store.Snapshot{}, err
	}
	env := map[string]string{}
	for _, m := range []map[string]string{rec.Env, opts.Env} {
		for k, v := range m {
			env[k] = v
		}
	}
	cwd := b.cwd
	if opts.Cwd != "" {
		cwd = opts.Cwd
	}
	sn := store.Snapshot{ID: "sn-" + randomHex(6), Kind: opts.Kind, SandboxID: b.id, ParentID: b.snapshotID,
		VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, Env: env, Cwd: cwd, Backend: m.opts.Driver.Name(),
		CacheKey: opts.CacheKey, CreatedAt: time.Now().UTC()}
	sn.Dir = m.snapshotDir(sn.ID)
	if err := os.MkdirAll(sn.Dir, 0o700); err != nil {
		return sn, err
	}
	fail := func(err error) (store.Snapshot, error) {
		os.RemoveAll(sn.Dir)
		return sn, err
	}
	t0 := time.Now()
	if err := m.freezeDisk(ctx, b, sn); err != nil {
		return fail(err)
	}
	t1 := time.Now()
	if err := b.vm.Snapshot(ctx, sn.Dir); err != nil {
		return fail(err)
	}
	m.log.Debug("snapshot captured", "sandbox_id", b.id, "snapshot_id", sn.ID, "disk", t1.Sub(t0), "state", time.Since(t1))
	names, size, err := dirFiles(sn.Dir)
	if err != nil {
		return fail(err)
	}
	// Restores may use the snapshot at once; its checksums are written in
	// the background (a snapshot without them is refused after a restart).
	if err := m.checker.Fresh(sn.Dir, names); err != nil {
		return fail(err)
	}
	go m.writeManifest(sn.Dir, names)
	sn.SizeBytes = size
	if err := m.opts.Store.PutSnapshot(ctx, sn); err != nil {
		return fail(err)
	}
	return sn, m.opts.Store.PutSandboxVM(ctx, store.SandboxVM{ID: b.id, SnapshotID: b.snapshotID, Overlay: b.overlay, Cwd: b.cwd})
}

// freezeDisk makes b's current overlay the snapshot's layer. With a VM that
// can switch disks, the overlay file itself becomes the layer (hard-linked
// into the snapshot) and the guest moves onto a new overlay backed by it;
// otherwise the layer is a copy.
func (m *Manager) freezeDisk(ctx context.Context, b *box, sn store.Snapshot) error {
	layer := filepath.Join(sn.Dir, layerFile)
	sw, ok := b.vm.(vmm.DiskSwitcher)
	if !ok {
		return copyFile(b.overlay, layer)
	}
	if err := os.Link(b.overlay, layer); err != nil {
		return err
	}
	next := b.nextOverlay()
	if err := disk.CreateOverlay(ctx, layer, next, 0); err != nil {
		return err
	}
	if err := m.own(next); err != nil {
		return err
	}
	if err := sw.SwitchDisk(ctx, 0, next); err != nil {
		os.Remove(next)
		return err
	}
	if err := os.Chmod(layer, 0o444); err != nil {
		return err
	}
	b.overlay, b.snapshotID = next, sn.ID
	return nil
}

// writeManifest sums a fresh snapshot's files and writes their manifest,
// unless they changed since the capture: then the snapshot stays without
// one, and is refused.
func (m *Manager) writeManifest(dir string, names []string) {
	man, err := snapshot.Sums(dir, names)
	if err == nil && !m.checker.Unchanged(dir) {
		err = errors.New("files changed after the capture")
	}
	if err == nil {
		err = man.Write(dir)
	}
	if err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			m.log.Error("snapshot manifest not written", "dir", dir, "err", err)
		}
		return
	}
	m.checker.Trust(dir, man)
}

func dirFiles(dir string) ([]string, int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	var names []string
	var size int64
	for _, e := range ents {
		if e.Name() == snapshot.ManifestFile {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, 0, err
		}
		names = append(names, e.Name())
		size += allocated(fi)
	}
	return names, size, nil
}

// allocated is the disk space a file takes (holes are free).
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// copyFile copies an overlay into a snapshot as its read-only layer,
// streaming (an overlay can be large) and syncing before it counts.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Sync(), dst.Close())
}

// source resolves opts.Snapshot or opts.Template to the snapshot to start
// from, and takes its size, env and cwd into opts.
func (m *Manager) source(ctx context.Context, opts *CreateOptions) (*store.Snapshot, error) {
	id := opts.Snapshot
	if opts.Template != "" {
		t, err := m.opts.Store.GetTemplate(ctx, opts.Template)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: template %s", ErrNotFound, opts.Template)
		}
		if err != nil {
			return nil, err
		}
		id = t.SnapshotID
	}
	if id == "" {
		return nil, nil
	}
	sn, err := m.opts.Store.GetSnapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: snapshot %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	if sn.Backend != m.opts.Driver.Name() {
		return nil, fmt.Errorf("%w: snapshot %s was made by %s, and this hostd runs %s", ErrInvalid, id, sn.Backend, m.opts.Driver.Name())
	}
	opts.VCPUs, opts.MemoryMiB = sn.VCPUs, sn.MemoryMiB
	env := map[string]string{}
	for k, v := range sn.Env {
		env[k] = v
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	opts.Env = env
	return &sn, nil
}

// restore starts box rec from snapshot sn and, when wake is set, resumes it
// with a fresh clock, entropy and identity. Without wake the VM stays
// paused (a warm pool entry).
func (m *Manager) restore(ctx context.Context, rec store.Sandbox, sn store.Snapshot, wake bool) (*box, error) {
	if err := m.checker.Verify(sn.Dir); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if err := os.MkdirAll(rec.Dir, 0o700); err != nil {
		return nil, err
	}
	b := &box{id: rec.ID, dir: rec.Dir, gone: make(chan struct{}), snapshotID: sn.ID, cwd: sn.Cwd}
	b.limits = m.limitsOf(ctx, rec.ID)
	b.overlay = b.nextOverlay()
	if err := disk.CreateOverlay(ctx, filepath.Join(sn.Dir, layerFile), b.overlay, 0); err != nil {
		return nil, err
	}
	if err := m.own(rec.Dir, b.overlay); err != nil {
		return nil, err
	}
	defer m.opts.Metrics.Since("restore", time.Now())
	cfg, err := m.placeVM(m.vmConfig(rec, b.overlay), b)
	if err != nil {
		return nil, err
	}
	vm, err := m.opts.Driver.Restore(ctx, cfg, sn.Dir)
	if err != nil {
		m.removeCgroup(b)
		return nil, err
	}
	b.vm = vm
	if err := m.placed(b); err != nil {
		m.log.Warn("vmm cgroup", "sandbox_id", b.id, "vm_pid", vm.PID(), "err", err)
	}
	if !wake {
		return b, nil
	}
	return b, m.wake(ctx, b, true)
}

// wake resumes a restored VM, connects its agent, and sets its clock,
// entropy and (for a new sandbox) its identity before any user command.
func (m *Manager) wake(ctx context.Context, b *box, identity bool) error {
	t0 := time.Now()
	if err := b.vm.Resume(ctx); err != nil {
		return errors.Join(err, b.vm.Stop(context.WithoutCancel(ctx)))
	}
	t1 := time.Now()
	if err := m.connect(ctx, b); err != nil {
		return err
	}
	t2 := time.Now()
	c, err := m.agent(ctx, b)
	if err != nil {
		return err
	}
	entropy := make([]byte, 64)
	_, _ = rand.Read(entropy)
	err = errors.Join(c.SetTime(ctx, time.Now()), c.Reseed(ctx, entropy))
	if identity && err == nil {
		err = c.SetIdentity(ctx, b.id, randomHex(16))
	}
	if err != nil {
		return errors.Join(fmt.Errorf("sandbox: prepare restored guest: %w", err), b.vm.Stop(context.WithoutCancel(ctx)))
	}
	m.log.Debug("sandbox woken", "sandbox_id", b.id, "resume", t1.Sub(t0), "connect", t2.Sub(t1), "prepare", time.Since(t2))
	return nil
}
