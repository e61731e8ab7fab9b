package sandbox

// A create, top to bottom: Create resolves what the caller asked for
// (source, resolve, the mounts), plans where the VM comes from (a
// template's or the base snapshot's warm pool, a snapshot, a boot:
// basePlan), then either claims a warm sandbox or records a new one and
// starts it (start: restore or boot, then its mounts), and adopts the
// running VM (adopt). Restores and wakes are the snapshot engine's
// (snapshot.Engine.StartCopy, snapshot.Wake); this file hands them the
// sandbox's config, network and cgroup.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/internal/steps"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
)

// Create starts a new sandbox (booting the base image, or restoring a
// snapshot or template) and returns once its agent answers.
func (m *Manager) Create(ctx context.Context, opts CreateOptions) (Info, error) {
	info, err := m.create(ctx, opts)
	if err != nil {
		return Info{}, err
	}
	return info, nil
}

// create is Create, whose Info names the sandbox it recorded, failed, when
// it fails after recording one.
func (m *Manager) create(ctx context.Context, opts CreateOptions) (Info, error) {
	defer m.opts.Metrics.Since("create", time.Now())
	src, err := m.source(ctx, &opts)
	if err != nil {
		return Info{}, err
	}
	if src != nil && opts.staged == nil {
		defer m.snaps.Release(src.ID) // held by source until the copy is recorded
	}
	if opts, err = m.resolve(opts); err != nil {
		return Info{}, err
	}
	release, err := m.capacity.admit(ctx, opts.VCPUs, opts.MemoryMiB)
	if err != nil {
		return Info{}, err
	}
	defer release() // the sandbox is recorded (running or failed) by then
	if opts.Mounts, err = m.mnts.validate(ctx, opts.Mounts); err != nil {
		return Info{}, err
	}
	defer m.mnts.unstage(opts.Mounts) // the clones a failed create staged
	gitEgress(&opts)
	var plan snapshot.BasePlan
	if src == nil {
		plan = m.basePlan(ctx, opts)
		if plan.Capture != "" {
			defer m.bases.ClaimBuild(plan.Capture, false)
		}
	}
	if info, ok, err := m.claimWarm(ctx, opts, plan.Pool); ok || err != nil {
		return info, err
	}
	rec, err := m.record(ctx, opts, src)
	if err != nil {
		return Info{}, err
	}
	if plan.Src != nil {
		src = plan.Src
	}
	b, err := m.start(ctx, rec, opts, src, plan)
	if err != nil {
		m.log.Error("create failed", "sandbox_id", rec.ID, "err", err)
		m.nets.detach(rec.ID)
		m.reg.remove(rec.ID)
		removeDir(rec.Dir, m.log)
		if b != nil {
			b.removeCgroup()
		}
		_ = m.setState(context.WithoutCancel(ctx), rec.ID, StateFailed, err.Error(), 0)
		return Info{ID: rec.ID, State: StateFailed}, fmt.Errorf("sandbox: create: %w", err)
	}
	t0 := time.Now()
	info, err := m.adopt(ctx, b, rec, true)
	m.log.Debug("create phase", "sandbox_id", rec.ID, "phase", "adopt", "took", time.Since(t0))
	return info, err
}

// source resolves opts.Snapshot or opts.Template to the snapshot to start
// from, and takes its size, env and cwd into opts. The snapshot is held
// (snapshot.Engine.HoldSnapshot), so that no delete takes it before the
// sandbox's record names it: the caller releases it. A fork's staged copy
// finds its snapshot held by the fork.
func (m *Manager) source(ctx context.Context, opts *CreateOptions) (*store.Snapshot, error) {
	if opts.staged != nil { // a fork's copy, while its snapshot is made
		sn := opts.staged.Planned()
		fromSnapshot(opts, sn)
		return &sn, nil
	}
	id := opts.Snapshot
	if opts.Template != "" {
		t, err := m.opts.Store.GetTemplate(ctx, opts.Template)
		if errors.Is(err, store.ErrNotFound) && m.port != nil {
			t, err = m.importTemplate(ctx, opts.Template) // made on another host
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrTemplateNotFound, opts.Template)
		}
		if err != nil {
			return nil, err
		}
		id = t.SnapshotID
	}
	if id == "" {
		return nil, nil
	}
	sn, err := m.snaps.HoldSnapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) && m.port != nil {
		if err = m.importSnapshotByID(ctx, id); err == nil { // taken on another host
			sn, err = m.snaps.HoldSnapshot(ctx, id)
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	if sn.Backend != m.opts.Driver.Name() {
		m.snaps.Release(id)
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

// resolve fills opts' defaults and checks them against the host's and the
// caller's maximums.
func (m *Manager) resolve(opts CreateOptions) (CreateOptions, error) {
	if opts.VCPUs == 0 {
		opts.VCPUs = m.opts.DefaultVCPUs
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = m.opts.DefaultMemoryMiB
	}
	switch {
	case opts.VCPUs < 1 || opts.VCPUs > m.opts.MaxVCPUs:
		return opts, fmt.Errorf("%w: vcpus must be 1..%d, got %d", ErrInvalid, m.opts.MaxVCPUs, opts.VCPUs)
	case opts.MemoryMiB < 128 || opts.MemoryMiB > m.opts.MaxMemoryMiB:
		return opts, fmt.Errorf("%w: memory_mib must be 128..%d, got %d", ErrInvalid, m.opts.MaxMemoryMiB, opts.MemoryMiB)
	case opts.TimeoutS < 0 || opts.TimeoutS > MaxTimeoutS:
		return opts, fmt.Errorf("%w: timeout_s must be 0..%d", ErrInvalid, MaxTimeoutS)
	}
	if err := m.limits.checkSizes(opts); err != nil {
		return opts, err
	}
	var err error
	if opts.Limits, err = m.limits.resolveFor(opts.Limits, opts.Caller); err != nil {
		return opts, err
	}
	if err := checkHostMemory(opts.Limits, opts.MemoryMiB); err != nil {
		return opts, err
	}
	return opts, m.nets.resolve(&opts)
}

// claimWarm serves the create from a warm pool (opts.Template's, else
// basePool, the base snapshot's) when one has a sandbox ready and the
// create asks for nothing a pool sandbox lacks (limits of its own,
// mounts); ok reports whether it did.
func (m *Manager) claimWarm(ctx context.Context, opts CreateOptions, basePool string) (info Info, ok bool, err error) {
	pool := basePool
	if opts.Template != "" {
		pool = opts.Template
	}
	if pool == "" || !m.limits.isDefault(opts.Limits) || len(opts.Mounts) > 0 {
		return Info{}, false, nil
	}
	b, rec, ok := m.warm.claim(ctx, pool, opts)
	if !ok {
		return Info{}, false, nil
	}
	if err := m.opts.Store.PutSandboxLimits(ctx, b.id, opts.Limits); err != nil {
		m.teardown(b, err)
		m.reg.remove(b.id)
		_ = m.setState(context.WithoutCancel(ctx), b.id, StateFailed, err.Error(), 0)
		return Info{}, true, err
	}
	info, err = m.adopt(ctx, b, rec, true)
	return info, true, err
}

// record stores a new sandbox's limits and record, state creating. A
// create that fails here leaves no record at all.
func (m *Manager) record(ctx context.Context, opts CreateOptions, src *store.Snapshot) (store.Sandbox, error) {
	id := newSandboxID()
	rec := store.Sandbox{ID: id, State: string(StateCreating), VCPUs: opts.VCPUs, MemoryMiB: opts.MemoryMiB,
		Env: opts.Env, Metadata: opts.Metadata, TimeoutS: opts.TimeoutS, CreatedAt: time.Now().UTC(),
		Dir: filepath.Join(m.opts.DataDir, "sandboxes", id)}
	if err := m.opts.Store.PutSandboxLimits(ctx, id, opts.Limits); err != nil {
		return rec, err
	}
	if err := m.opts.Store.PutSandbox(ctx, rec); err != nil {
		return rec, errors.Join(err, m.opts.Store.DeleteSandboxLimits(context.WithoutCancel(ctx), id))
	}
	m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionState, State: string(StateCreating)})
	if src != nil {
		m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionRestore, SnapshotID: src.ID, SourceID: src.SandboxID})
	}
	return rec, nil
}

func newSandboxID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "sb-" + hex.EncodeToString(b)
}

// start makes sandbox rec's network, disk and VM (restoring src, or booting
// and, for plan.Capture, capturing the base snapshot) and serves its mounts.
func (m *Manager) start(ctx context.Context, rec store.Sandbox, opts CreateOptions, src *store.Snapshot, plan snapshot.BasePlan) (*runningVM, error) {
	id := rec.ID
	var err error
	var b *runningVM
	// The network (namespace, tap, nftables, proxy) is made while the disk
	// is: boot and restore wait for it only to configure the VM.
	netDone := make(chan error, 1)
	go func() {
		t0 := time.Now()
		err := m.nets.attach(ctx, id, opts.Network)
		m.log.Debug("create phase", "sandbox_id", id, "phase", "network", "took", time.Since(t0))
		netDone <- err
	}()
	netOnce := sync.OnceValue(func() error { return <-netDone })
	switch {
	case src != nil:
		b, err = m.restore(ctx, rec, snapshot.From{Snapshot: *src, Gate: opts.staged}, true, netOnce)
		if err != nil && plan.Src != nil {
			b, err = m.bootAfterBadBase(ctx, rec, opts, *plan.Src, b, err, netOnce)
		}
	default:
		b, err = m.boot(ctx, rec, opts, netOnce)
		if err == nil && plan.Capture != "" {
			err = m.captureBase(ctx, b, rec, plan.Capture)
		}
	}
	if err == nil {
		fault.Point("create:booted")
		t0 := time.Now()
		err = m.mnts.start(ctx, b, opts.Mounts)
		m.log.Debug("create phase", "sandbox_id", id, "phase", "mounts", "took", time.Since(t0))
		if err != nil {
			_ = b.vm.Stop(context.WithoutCancel(ctx))
			b.end(err)
		}
	}
	if err == nil {
		err = netOnce() // waited for already; here for the error
	} else {
		_ = netOnce() // the attach ends before its network is removed
	}
	return b, err
}

// restore starts sandbox rec's VM from snapshot from (snapshot.Engine.StartCopy:
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

// boot makes the sandbox's disk on opts.BaseImage ("" for hostd's base
// image), starts its VM (on opts.Kernel and Initramfs, if set) and
// connects its agent, in named steps.
func (m *Manager) boot(ctx context.Context, rec store.Sandbox, opts CreateOptions, netReady func() error) (*runningVM, error) {
	base := opts.BaseImage
	if base == "" {
		base = m.opts.BaseImage
	}
	if err := os.MkdirAll(rec.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := m.jail.claim(rec.Dir); err != nil {
		return nil, err
	}
	b := m.newBox(ctx, rec)
	b.overlay = b.nextOverlay()
	var cfg vmm.Config
	err := steps.List{
		{Name: "overlay", Run: func(ctx context.Context) error {
			if err := disk.CreateOverlay(ctx, base, b.overlay, 0); err != nil {
				return err
			}
			return ownFiles(b.overlay)
		}},
		{Name: "network_wait", Run: func(context.Context) error { return netReady() }},
		{Name: "cgroup", Run: func(context.Context) error {
			vc := m.vmConfig(rec, b.overlay)
			if opts.Kernel != "" {
				vc.Kernel = opts.Kernel
			}
			if opts.Initramfs != "" {
				vc.Initramfs = opts.Initramfs
			}
			var err error
			cfg, err = m.vmms.place(vc, b)
			return err
		}, Undo: b.removeCgroup},
		{Name: "vmm_start", Run: func(ctx context.Context) error { // process spawn and QMP
			vm, err := m.opts.Driver.Start(ctx, cfg)
			b.vm = vm
			return err
		}},
		// The kernel, guestinit and the channel handshake; a failed
		// connection stops the VM.
		{Name: "agent", Run: func(ctx context.Context) error { return b.connect(ctx, m.opts.BootTimeout) }},
		{Name: "clock", Run: func(ctx context.Context) error {
			if err := setClock(ctx, b); err != nil { // see clock.go
				m.log.Warn("guest clock not set", "sandbox_id", b.id, "err", err)
			}
			return nil
		}},
	}.Run(ctx, newPhases(m.log, rec.ID, "boot").done)
	if err != nil {
		return nil, err
	}
	newPhases(m.log, rec.ID, "boot").guest(cfg.ConsoleLog)
	return b, nil
}

// newBox makes the box of a VM of sandbox rec, before the VM exists.
func (m *Manager) newBox(ctx context.Context, rec store.Sandbox) *runningVM {
	e := m.reg.get(rec.ID)
	return &runningVM{id: rec.ID, dir: rec.Dir, env: rec.Env, log: m.log, gone: make(chan struct{}), dialing: make(chan struct{}, 1), meter: &e.meter, spawn: m.spawn,
		limits: m.limits.of(ctx, rec.ID)}
}

func (m *Manager) vmConfig(rec store.Sandbox, overlay string) vmm.Config {
	nic, args := m.nets.of(rec.ID) // see network.go
	if m.opts.Recorder == nil {
		args += " agentbox.watch=off" // no log to feed: no guest watcher
	}
	return vmm.Config{
		ID: rec.ID, Dir: rec.Dir, Kernel: m.opts.Kernel, Initramfs: m.opts.Initramfs,
		Cmdline: "agentbox.hostname=" + rec.ID + args, VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB,
		Disks: []vmm.Disk{{Path: overlay}}, ConsoleLog: filepath.Join(rec.Dir, "console.log"), Net: nic,
	}
}

// adopt makes a booted box a running sandbox: records, guest limits,
// TTL, watcher. The record says running only once all of it held: a VM
// that fails here is stopped and its sandbox recorded failed, with the
// reason; a new one's (fresh) files go with it, an existing one's disk
// stays for its owner, as a failed sandbox's does.
func (m *Manager) adopt(ctx context.Context, b *runningVM, rec store.Sandbox, fresh bool) (Info, error) {
	rec.State, rec.VMPID = string(StateRunning), b.vm.PID()
	err := m.opts.Store.PutSandboxVM(ctx, store.SandboxVM{ID: b.id, SnapshotID: b.snapshotID, Overlay: b.overlay, Cwd: b.cwd, User: b.user})
	if err == nil { // the VMM's identity, as the VM has it (adopt.go)
		err = writeVMState(b.dir, vmState{Backend: m.opts.Driver.Name(), Process: b.vm.Process()})
	}
	if err == nil {
		err = b.applyGuestLimits(ctx)
	}
	if err == nil {
		err = m.setState(ctx, b.id, State(rec.State), "", rec.VMPID)
	}
	if err != nil {
		if fresh {
			m.teardown(b, err)
		} else {
			m.stopBox(b, err)
		}
		m.reg.remove(b.id)
		_ = m.setState(context.WithoutCancel(ctx), b.id, StateFailed, err.Error(), 0)
		return Info{}, err
	}
	e := m.reg.get(b.id)
	e.mu.Lock()
	e.box = b
	due := e.dueKills
	e.dueKills = nil
	e.mu.Unlock()
	m.ttls.arm(e, time.Duration(rec.TimeoutS)*time.Second)
	b.touch()
	m.rec.startGuest(ctx, b)
	m.rec.resumeExecs(b)
	m.spawn(func() { m.watch(b) })
	m.spawn(func() { b.watchIdle(m.opts.IdleCPU, m.Pause) })
	m.spawn(b.keepClock)
	m.spawn(func() { b.capConsole(filepath.Join(b.dir, "console.log")) })
	for _, execID := range due {
		m.timeouts.kill(b.id, execID)
	}
	m.log.Info("sandbox running", "sandbox_id", b.id, "vm_pid", rec.VMPID, "snapshot_id", b.snapshotID)
	info := m.withLimits(ctx, infoOf(rec))
	info.SnapshotID = b.snapshotID
	return info, nil
}
