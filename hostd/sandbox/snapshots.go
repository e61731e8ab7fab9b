package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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

// source resolves opts.Snapshot or opts.Template to the snapshot to start
// from, and takes its size, env and cwd into opts.
func (m *Manager) source(ctx context.Context, opts *CreateOptions) (*store.Snapshot, error) {
	if opts.staged != nil { // a fork's copy, while its snapshot is made
		sn := opts.staged.planned
		fromSnapshot(opts, sn)
		return &sn, nil
	}
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
		return nil, fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	if sn.Backend != m.opts.Driver.Name() {
		return nil, fmt.Errorf("%w: snapshot %s was made by %s, and this hostd runs %s", ErrInvalid, id, sn.Backend, m.opts.Driver.Name())
	}
	fromSnapshot(opts, sn)
	return &sn, nil
}

// fromSnapshot takes sn's size and env into opts (opts.Env wins).
func fromSnapshot(opts *CreateOptions, sn store.Snapshot) {
	opts.VCPUs, opts.MemoryMiB = sn.VCPUs, sn.MemoryMiB
	env := map[string]string{}
	for k, v := range sn.Env {
		env[k] = v
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	opts.Env = env
}

// restore starts box rec from snapshot sn and, when wake is set, resumes it
// with a fresh clock, entropy and identity. Without wake the VM stays
// paused (a warm pool entry). With staged, sn is still being captured: its
// VMM starts now (vmm.Stager) and loads sn once the capture ended.
func (m *Manager) restore(ctx context.Context, rec store.Sandbox, sn store.Snapshot, wake bool, netReady func() error, staged *forkGate) (*box, error) {
	if err := os.MkdirAll(rec.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := m.jail.claim(rec.Dir); err != nil {
		return nil, err
	}
	b := m.newBox(ctx, rec)
	b.snapshotID, b.cwd, b.user = sn.ID, sn.Cwd, sn.User
	b.overlay = b.nextOverlay()
	// A sandbox restored and left asleep is a warm pool's: work done ahead,
	// which yields the CPU to sandboxes in use until a claim wakes it.
	b.background = !wake
	ph := newPhases(m.log, rec.ID, "restore")
	prepare := m.snaps.Prepare
	if staged != nil {
		prepare = m.snaps.Overlay // checked once captured (load)
	}
	if err := prepare(ctx, sn, b.overlay); err != nil {
		return nil, err
	}
	ph.done("overlay") // checksums (first use) and the overlay
	if err := netReady(); err != nil {
		return nil, err
	}
	ph.done("network_wait")
	defer m.opts.Metrics.Since("restore", time.Now())
	cfg, err := m.vmms.place(m.vmConfig(rec, b.overlay), b)
	if err != nil {
		return nil, err
	}
	// A base snapshot's sandboxes are forked like booted ones: their own
	// memory keeps their snapshots' memory a file that forks share.
	cfg.OwnMemory = sn.Kind == baseKind
	ph.done("cgroup")
	var vm vmm.VM
	if staged != nil {
		vm, err = m.load(ctx, cfg, sn, staged, ph)
	} else {
		vm, err = m.snaps.Restore(ctx, m.opts.Driver, cfg, sn)
	}
	if err != nil {
		b.removeCgroup()
		return nil, err
	}
	b.vm = vm
	ph.done("vmm_restore") // process spawn, QMP, incoming migration
	if !wake {
		return b, nil
	}
	return b, m.wake(ctx, b, true)
}

// wake resumes a restored VM, connects its agent, and sets its clock,
// entropy and (for a new sandbox) its identity before any user command.
func (m *Manager) wake(ctx context.Context, b *box, identity bool) error {
	ph := newPhases(m.log, b.id, "wake")
	if err := b.vm.Resume(ctx); err != nil {
		return errors.Join(err, b.vm.Stop(context.WithoutCancel(ctx)))
	}
	ph.done("resume")
	// The clock, entropy and identity calls are the new connection's probe:
	// the guest's answer to them is its agent's, with no Health call before.
	// Only a call that got no answer (the channel closed, the attempt's
	// time ran out) tries a new connection; an error the agent answered
	// fails the wake at once, as a new connection would get it too.
	prepared := false
	var prepErr error
	prepare := func(ctx context.Context, c *agentclient.Client) error {
		err := prepareClient(ctx, c, b.id, identity)
		if err != nil && (errors.Is(err, agentclient.ErrClosed) || ctx.Err() != nil) {
			return err
		}
		prepared, prepErr = true, err
		return nil
	}
	if err := b.reconnect(ctx, m.opts.BootTimeout, prepare); err != nil {
		return err
	}
	if !prepared { // the box had a connection already
		prepErr = prepareGuest(ctx, b, identity)
	}
	if prepErr != nil {
		return errors.Join(prepErr, b.vm.Stop(context.WithoutCancel(ctx)))
	}
	ph.done("agent") // channel reset and handshake: clock, entropy, identity
	return nil
}

// prepareGuest is prepareClient over b's agent connection.
func prepareGuest(ctx context.Context, b *box, identity bool) error {
	c, err := b.client(ctx)
	if err != nil {
		return err
	}
	return prepareClient(ctx, c, b.id, identity)
}

// prepareClient sets a restored guest's clock and reseeds its RNG and, with
// identity, gives it the hostname id and a new machine id: in one round
// trip, not three, as the agent serves the calls concurrently.
func prepareClient(ctx context.Context, c *agentclient.Client, id string, identity bool) error {
	entropy := make([]byte, 64)
	_, _ = rand.Read(entropy)
	var wg sync.WaitGroup
	var errs [3]error
	wg.Go(func() { errs[0] = c.SetTime(ctx, time.Now()) })
	wg.Go(func() { errs[1] = c.Reseed(ctx, entropy) })
	if identity {
		wg.Go(func() { errs[2] = c.SetIdentity(ctx, id, randomHex(16)) })
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("sandbox: prepare restored guest: %w", err)
	}
	return nil
}
