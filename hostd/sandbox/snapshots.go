package sandbox

import (
	"context"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
)

// snapshotStore is the persistence of snapshots and templates.
type snapshotStore interface {
	PutSandboxVM(ctx context.Context, v store.SandboxVM) error
	GetSandboxVM(ctx context.Context, id string) (store.SandboxVM, error)
	DeleteSandboxVM(ctx context.Context, id string) error
	snapshot.Store
	FindSnapshotByKey(ctx context.Context, key string) (store.Snapshot, error)
	PutTemplate(ctx context.Context, t store.Template) error
	GetTemplate(ctx context.Context, name string) (store.Template, error)
	ListTemplates(ctx context.Context) ([]store.Template, error)
	DeleteTemplate(ctx context.Context, name string) error
}

// Snapshot captures a running sandbox through the snapshot engine: its
// filesystems are flushed through the agent, the VM is paused, its disk
// overlay becomes the snapshot's read-only layer under a fresh overlay, and
// its device state and memory are saved. The sandbox then resumes unless
// asked to stay paused.
func (m *Manager) Snapshot(ctx context.Context, id string, opts SnapshotOptions) (SnapshotInfo, error) {
	return m.snapshot(ctx, id, opts, nil)
}

// snapshot is Snapshot, calling planned, if set, with the snapshot being
// made, where the capture can stage restores (snapshot.Options.Planned).
func (m *Manager) snapshot(ctx context.Context, id string, opts SnapshotOptions, planned func(store.Snapshot)) (SnapshotInfo, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return SnapshotInfo{}, err
	}
	if err := CheckUser(opts.User); err != nil {
		return SnapshotInfo{}, err
	}
	b.op.Lock()
	defer b.op.Unlock()
	c, err := b.client(ctx)
	if err != nil {
		return SnapshotInfo{}, b.streamErr(err)
	}
	rec, err := m.opts.Store.GetSandbox(ctx, b.id)
	if err != nil {
		return SnapshotInfo{}, err
	}
	env := maps.Clone(rec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, opts.Env)
	cwd, user := b.cwd, b.user
	if opts.Cwd != "" {
		cwd = opts.Cwd
	}
	if opts.User != "" {
		user = opts.User
	}
	src := &snapshot.Source{SandboxID: b.id, VM: b.vm, Overlay: b.overlay, ParentID: b.snapshotID, NextOverlay: b.nextOverlay,
		VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, Env: env, Cwd: cwd, User: user}
	sn, err := m.snaps.Capture(ctx, src, c, snapshot.Options{Kind: opts.Kind, CacheKey: opts.CacheKey, StayPaused: opts.StayPaused,
		BeforePause: func(ctx context.Context) { m.rec.drainGuest(ctx, b) }, Planned: planned})
	if err != nil {
		return SnapshotInfo{}, b.streamErr(fmt.Errorf("sandbox: %w", err))
	}
	fault.Point("snapshot:captured")
	b.overlay, b.snapshotID = src.Overlay, src.ParentID
	if err := m.opts.Store.PutSandboxVM(ctx, store.SandboxVM{ID: b.id, SnapshotID: b.snapshotID, Overlay: b.overlay, Cwd: b.cwd, User: b.user}); err != nil {
		return SnapshotInfo{}, err
	}
	m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionSnapshot, SnapshotID: sn.ID, Reason: sn.Kind})
	return m.snaps.Info(ctx, sn)
}

// restore starts box rec from snapshot sn (snapshot.Engine.StartCopy:
// its overlay, network, cgroup and VM) and, when wake is set, wakes it as
// a new sandbox. Without wake the VM stays paused (a warm pool entry).
// With from.Gate set, sn is still being captured: its VMM starts now and
// loads sn once the capture ended.
func (m *Manager) restore(ctx context.Context, rec store.Sandbox, from snapshot.From, wake bool, netReady func() error) (*runningVM, error) {
	if err := os.MkdirAll(rec.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := m.jail.claim(rec.Dir); err != nil {
		return nil, err
	}
	sn := from.Snapshot
	b := m.newBox(ctx, rec)
	b.snapshotID, b.cwd, b.user = sn.ID, sn.Cwd, sn.User
	b.overlay = b.nextOverlay()
	// A sandbox restored and left asleep is a warm pool's: work done ahead,
	// which yields the CPU to sandboxes in use until a claim wakes it.
	b.background = !wake
	ph := newPhases(m.log, rec.ID, "restore")
	defer m.opts.Metrics.Since("restore", time.Now())
	vm, err := m.snaps.StartCopy(ctx, m.opts.Driver, snapshot.Copy{From: from, Overlay: b.overlay, NetReady: netReady,
		Config:  func() (vmm.Config, error) { return m.vmms.place(m.vmConfig(rec, b.overlay), b) },
		Unplace: b.removeCgroup, Phase: ph.done})
	if err != nil {
		return nil, err
	}
	b.vm = vm
	if !wake {
		return b, nil
	}
	return b, m.wake(ctx, b, true)
}

// wake resumes a restored VM, connects its agent, and sets its clock,
// entropy and (for a new sandbox) its identity before any user command
// (snapshot.Wake).
func (m *Manager) wake(ctx context.Context, b *runningVM, identity bool) error {
	ph := newPhases(m.log, b.id, "wake")
	return snapshot.Wake(ctx, b.vm, b, snapshot.WakeOptions{ID: b.id, Identity: identity, Timeout: m.opts.BootTimeout, Phase: ph.done})
}
