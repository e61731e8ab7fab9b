package sandbox

import (
	"context"
	"fmt"
	"maps"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/snapshot"
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
	info, err := m.snapshot(ctx, id, opts, nil)
	if err == nil {
		m.snaps.Release(info.ID)
	}
	return info, err
}

// snapshot is Snapshot, calling planned, if set, with the snapshot being
// made, where the capture can stage restores (snapshot.Options.Planned).
// The new snapshot is held (snapshot.Engine.Hold) from the moment it
// exists: on success the caller releases it, once what uses it is
// recorded.
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
		BeforePause: func(ctx context.Context) { m.rec.drainGuest(ctx, b) }, Planned: planned, Hold: true})
	if err != nil {
		return SnapshotInfo{}, b.streamErr(fmt.Errorf("sandbox: %w", err))
	}
	release := func() { m.snaps.Release(sn.ID) }
	fault.Point("snapshot:captured")
	b.overlay, b.snapshotID = src.Overlay, src.ParentID
	if err := m.opts.Store.PutSandboxVM(ctx, store.SandboxVM{ID: b.id, SnapshotID: b.snapshotID, Overlay: b.overlay, Cwd: b.cwd, User: b.user}); err != nil {
		release()
		return SnapshotInfo{}, err
	}
	m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionSnapshot, SnapshotID: sn.ID, Reason: sn.Kind})
	info, err := m.snaps.Info(ctx, sn)
	if err != nil {
		release()
	}
	return info, err
}
