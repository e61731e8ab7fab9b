package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/vmm"
)

// Fork snapshots sandbox id and starts count copy-on-write copies of it.
// Each fork gets its own disk overlay, hostname, machine-id, entropy and
// clock; unchanged memory pages stay shared with the snapshot.
//
// Where the backend stages restores (vmm.Stager), the first copies start
// while the snapshot is made: their disks, networks and VMMs are ready
// once the parent's state is written, and they load it then.
func (m *Manager) Fork(ctx context.Context, id string, count int) ([]Info, error) {
	if count < 1 || count > 64 {
		return nil, fmt.Errorf("%w: count must be 1..64, got %d", ErrInvalid, count)
	}
	defer m.opts.Metrics.Since("fork", time.Now())
	parent, err := m.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, notFound(err, id)
	}
	pol := m.nets.inherited(ctx, id)
	mnts, err := m.mnts.saved(parent.Dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: fork %s: mounts: %w", id, err)
	}
	meta := map[string]string{}
	for k, v := range parent.Metadata {
		meta[k] = v
	}
	meta["forked_from"] = id
	f := &forkRun{m: m, ctx: ctx, out: make([]Info, count), errs: make([]error, count),
		slots: make(chan struct{}, m.opts.ForkParallel),
		opts:  CreateOptions{Env: parent.Env, Metadata: meta, TimeoutS: parent.TimeoutS, Network: pol, Limits: m.limits.of(ctx, id), Mounts: mnts}}
	var planned func(store.Snapshot)
	if _, ok := m.opts.Driver.(vmm.Stager); ok {
		planned = f.stage
	}
	sn, err := m.snapshot(ctx, id, SnapshotOptions{Kind: "fork"}, planned)
	if err == nil {
		fault.Point("fork:snapshotted")
	}
	f.captured(sn.ID, err)
	f.wg.Wait()
	if err == nil {
		err = errors.Join(f.errs...)
	}
	if err != nil {
		f.remove()
		return nil, err
	}
	for _, c := range f.out {
		m.rec.lifecycle(ctx, c.ID, recorder.LifecycleData{Action: recorder.ActionFork, SourceID: id, SnapshotID: sn.ID})
	}
	return f.out, nil
}

// forkRun starts the copies of one Fork.
type forkRun struct {
	m    *Manager
	ctx  context.Context
	opts CreateOptions // of every copy
	// slots: the copies start ForkParallel at a time. Each one's start is
	// CPU work (the VMM's start, the guest's wake), and more of them at
	// once than the host has CPUs only makes them take turns: 10 forks on
	// 2 CPUs took ~5 % longer all at once than 2 at a time.
	slots chan struct{}
	wg    sync.WaitGroup
	out   []Info
	errs  []error
	// next is the first copy not started yet; gate, if set, is the
	// capture's end for the copies stage started.
	next int
	gate *forkGate
}

// forkGate hands a fork's staged copies the end of its capture.
type forkGate struct {
	planned store.Snapshot // the snapshot being made
	done    chan struct{}
	err     error // the capture's, set before done closes
}

// wait returns once the capture ended, with its error, or ctx's.
func (g *forkGate) wait(ctx context.Context) error {
	select {
	case <-g.done:
		if g.err != nil {
			return fmt.Errorf("the fork's snapshot failed: %w", g.err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stage starts as many copies as there are slots on sn, the snapshot the
// capture makes (snapshot.Options.Planned). It runs inside the capture.
func (f *forkRun) stage(sn store.Snapshot) {
	f.gate = &forkGate{planned: sn, done: make(chan struct{})}
	for f.next < len(f.out) && len(f.slots) < cap(f.slots) {
		f.slots <- struct{}{} // free: no copy ran before
		opts := f.opts
		opts.staged = f.gate
		f.start(opts, false)
	}
}

// captured ends the staged copies' wait with the capture's err and, if the
// capture made snapshot id, starts the other copies from it.
func (f *forkRun) captured(id string, err error) {
	if f.gate != nil {
		f.gate.err = err
		close(f.gate.done)
	}
	if err != nil {
		return
	}
	for f.next < len(f.out) {
		opts := f.opts
		opts.Snapshot = id
		f.start(opts, true)
	}
}

// start starts copy f.next with opts; take is set when it has to take a
// slot first (stage took it already).
func (f *forkRun) start(opts CreateOptions, take bool) {
	i := f.next
	f.next++
	f.wg.Go(func() {
		if take {
			f.slots <- struct{}{}
		}
		defer func() { <-f.slots }()
		f.out[i], f.errs[i] = f.m.create(f.ctx, opts)
	})
}

// remove deletes the copies of a fork that failed: those that started,
// and, when the capture failed, those it failed (records the caller never
// learned of).
func (f *forkRun) remove() {
	captureFailed := f.gate != nil && f.gate.err != nil
	for i, c := range f.out {
		if c.ID != "" && (f.errs[i] == nil || captureFailed) {
			_ = f.m.Delete(context.WithoutCancel(f.ctx), c.ID)
		}
	}
}

// load stages a VM for sn, a snapshot being captured, and loads sn into it
// once the capture ended and sn passed its check.
func (m *Manager) load(ctx context.Context, cfg vmm.Config, sn store.Snapshot, g *forkGate, ph *phaseLog) (vmm.VM, error) {
	vm, err := m.snaps.Stage(ctx, m.opts.Driver, cfg, sn)
	if err != nil {
		return nil, err
	}
	ph.done("vmm_stage") // process spawn, QMP
	err = g.wait(ctx)
	if err == nil {
		err = m.snaps.Check(sn)
	}
	ph.done("capture_wait")
	if err != nil {
		return nil, errors.Join(err, vm.Stop(context.WithoutCancel(ctx)))
	}
	if err := vm.Load(ctx); err != nil {
		return nil, err
	}
	return vm, nil
}
