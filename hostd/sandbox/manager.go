package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/hostd/mounts"
	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
)

// Store is the persistence the manager needs (hostd/store implements it).
type Store interface {
	PutSandbox(ctx context.Context, sb store.Sandbox) error
	GetSandbox(ctx context.Context, id string) (store.Sandbox, error)
	ListSandboxes(ctx context.Context) ([]store.Sandbox, error)
	SetSandboxState(ctx context.Context, id, state, errMsg string, vmPID int) error
	DeleteSandbox(ctx context.Context, id string) error
	snapshotStore
	limitStore
}

var _ Store = (*store.Store)(nil)

// Options configure a Manager.
type Options struct {
	Driver vmm.Driver
	Store  Store
	// DataDir holds sandboxes/<id>/.
	DataDir string
	// Kernel, Initramfs and BaseImage are the guest's boot assets.
	Kernel, Initramfs, BaseImage string
	// Defaults for requests that don't say, and the largest allowed.
	DefaultVCPUs, DefaultMemoryMiB int
	MaxVCPUs, MaxMemoryMiB         int
	// BootTimeout bounds a boot to agent-ready.
	BootTimeout time.Duration
	// Network gives sandboxes a NIC behind the egress proxy; nil: no NICs.
	Network Network
	Logger  *slog.Logger
	// Limits are the defaults and maximums of sandboxes' limits.
	Limits LimitOptions
	// KeyMax are per-API-key maximums, by key name.
	KeyMax map[string]Maximums
	// VMMUIDs, if set, gives each sandbox's VMM a uid (and gid) of its own
	// from the range; VMMOwner, if set, is the one user they all run as.
	// With neither the VMMs run as hostd's user (jail.go).
	VMMUIDs  *UIDRange
	VMMOwner *Owner
	// UIDClaims is the directory where the host's hostds claim VMM uids
	// (default DefaultUIDClaims; uidclaims.go).
	UIDClaims string
	// Cgroups, if set, gives each VMM process its own cgroup.
	Cgroups Cgroups
	// IdleCPU is the CPU use under which a sandbox is idle (default
	// DefaultIdleCPU).
	IdleCPU float64
	// Metrics, if set, observes latencies.
	Metrics Observer
	// Recorder, if set, keeps the flight recorder's log (record.go).
	Recorder *recorder.Recorder
	// EventRetention, if set, is how long events are kept (the reaper
	// drops older ones); zero keeps them.
	EventRetention time.Duration
	// Mounts is the operator's mount policy (the host roots that host
	// mounts may use).
	Mounts mounts.Config
	// BaseSnapshots makes creates with no template or snapshot restores of
	// a built-in snapshot of the booted base image (base.go).
	BaseSnapshots bool
	// BasePool is how many paused sandboxes of the default shape's base
	// snapshot are kept warm (with BaseSnapshots; 0 keeps none).
	BasePool int
	// ForkParallel is how many of one fork's copies start at once
	// (default: the host's CPUs, at least 2).
	ForkParallel int
}

// Validate checks the options.
func (o Options) Validate() error {
	switch {
	case o.Driver == nil || o.Store == nil:
		return errors.New("sandbox: Driver and Store are required")
	case o.DataDir == "" || o.Kernel == "" || o.BaseImage == "":
		return errors.New("sandbox: DataDir, Kernel and BaseImage are required")
	}
	for _, p := range []string{o.Kernel, o.Initramfs, o.BaseImage} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("sandbox: guest asset: %w (run `make assets`)", err)
		}
	}
	return nil
}

// Manager owns every sandbox of one hostd. Its state is one entry per
// sandbox (registry.go); the snapshot engine, the warm pools and each
// entry's meter, timer and recorder state are small types with locks of
// their own. See the package doc for the lock order.
type Manager struct {
	opts  Options
	log   *slog.Logger
	snaps *snapshot.Engine
	reg   registry
	pools pools
	warm  warm
	bases *bases
	// timeouts kills execs past their timeout; takeover takes over an
	// earlier hostd's execs.
	timeouts *execTimeouts
	takeover *takeover
	ttls     *ttls
	vmms     *vmms
	reaper   *reaper
	nets     networks
	rec      flight
	// limits resolves requests' limits (it knows the base image's size).
	limits limitPolicy
	// mnts serves the sandboxes' mounts (mounts.go).
	mnts mountSets
	// jail hands out the VMMs' users (jail.go).
	jail *jail

	// bgMu guards closed and the adding to bg: Close waits for bg, the
	// goroutines of background work (watchers, pool refills, timers).
	bgMu   sync.Mutex
	closed bool
	bg     sync.WaitGroup
}

// spawn runs fn in a goroutine that Close waits for; once Close has begun
// it runs nothing and returns false.
func (m *Manager) spawn(fn func()) bool {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.closed {
		return false
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		fn()
	}()
	return true
}

// closing reports whether Close has begun.
func (m *Manager) closing() bool {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	return m.closed
}

// New returns a Manager. Call Recover before serving.
func New(opts Options) (*Manager, error) {
	if opts.DefaultVCPUs == 0 {
		opts.DefaultVCPUs = 1
	}
	if opts.DefaultMemoryMiB == 0 {
		opts.DefaultMemoryMiB = 512
	}
	if opts.MaxVCPUs == 0 {
		opts.MaxVCPUs = 8
	}
	if opts.MaxMemoryMiB == 0 {
		opts.MaxMemoryMiB = 16384
	}
	if opts.BootTimeout == 0 {
		opts.BootTimeout = 90 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.IdleCPU == 0 {
		opts.IdleCPU = DefaultIdleCPU
	}
	if opts.ForkParallel == 0 {
		opts.ForkParallel = max(2, runtime.NumCPU())
	}
	if opts.Metrics == nil {
		opts.Metrics = nopObserver{}
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(opts.DataDir, "sandboxes"), 0o700); err != nil {
		return nil, err
	}
	jl, err := newJail(opts)
	if err != nil {
		return nil, err
	}
	snaps, err := snapshot.New(snapshot.Config{Dir: filepath.Join(opts.DataDir, "snapshots"), Backend: opts.Driver.Name(),
		Store: opts.Store, Logger: opts.Logger, Own: ownFiles})
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, log: opts.Logger, snaps: snaps, jail: jl}
	m.warm = warm{m: m}
	m.bases = newBases(opts, snaps, &m.warm, m.spawn)
	m.vmms = &vmms{backend: opts.Driver.Name(), cgroups: opts.Cgroups, nets: &m.nets, log: opts.Logger}
	m.reaper = newReaper(opts, &m.reg, &m.pools, m.vmms)
	m.timeouts = &execTimeouts{reg: &m.reg, log: opts.Logger, spawn: m.spawn}
	events, _ := opts.Store.(eventLister)
	m.ttls = &ttls{reg: &m.reg, rec: &m.rec, log: opts.Logger, spawn: m.spawn, pause: m.Pause, del: m.Delete,
		onTimeout: func(ctx context.Context, id string) string { return m.limits.of(ctx, id).OnTimeout }}
	m.takeover = &takeover{reg: &m.reg, rec: &m.rec, log: opts.Logger, events: events, timeouts: m.timeouts}
	m.nets = networks{net: opts.Network, reg: &m.reg, log: opts.Logger}
	m.rec = flight{r: opts.Recorder, reg: &m.reg, spawn: m.spawn, log: opts.Logger}
	m.mnts = newMountSets(opts.Mounts, opts.DataDir)
	m.limits = limitPolicy{opts: opts.Limits, keyMaxes: opts.KeyMax, cgroups: opts.Cgroups != nil, store: opts.Store, log: opts.Logger}
	if info, err := disk.Inspect(context.Background(), opts.BaseImage); err == nil {
		m.limits.baseMiB = int(info.VirtualSize >> 20)
	}
	return m, nil
}

func newSandboxID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "sb-" + hex.EncodeToString(b)
}

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
	if opts, err = m.resolve(opts); err != nil {
		return Info{}, err
	}
	if opts.Mounts, err = m.mnts.validate(ctx, opts.Mounts); err != nil {
		return Info{}, err
	}
	defer m.mnts.unstage(opts.Mounts) // the clones a failed create staged
	gitEgress(&opts)
	var plan baseCreate // see base.go
	if src == nil {
		plan = m.bases.plan(ctx, opts)
		if plan.capture != "" {
			defer m.bases.claimBuild(plan.capture, false)
		}
	}
	pool := plan.pool
	if opts.Template != "" {
		pool = opts.Template
	}
	if pool != "" && m.limits.isDefault(opts.Limits) && len(opts.Mounts) == 0 {
		if b, rec, ok := m.warm.claim(ctx, pool, opts); ok {
			if err := m.opts.Store.PutSandboxLimits(ctx, b.id, opts.Limits); err != nil {
				m.teardown(b, err)
				m.reg.remove(b.id)
				_ = m.setState(context.WithoutCancel(ctx), b.id, StateFailed, err.Error(), 0)
				return Info{}, err
			}
			return m.adopt(ctx, b, rec)
		}
	}
	id := newSandboxID()
	rec := store.Sandbox{ID: id, State: string(StateCreating), VCPUs: opts.VCPUs, MemoryMiB: opts.MemoryMiB,
		Env: opts.Env, Metadata: opts.Metadata, TimeoutS: opts.TimeoutS, CreatedAt: time.Now().UTC(),
		Dir: filepath.Join(m.opts.DataDir, "sandboxes", id)}
	// The limits first: a create that fails here leaves no record at all.
	if err := m.opts.Store.PutSandboxLimits(ctx, id, opts.Limits); err != nil {
		return Info{}, err
	}
	if err := m.opts.Store.PutSandbox(ctx, rec); err != nil {
		return Info{}, errors.Join(err, m.opts.Store.DeleteSandboxLimits(context.WithoutCancel(ctx), id))
	}
	m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionState, State: string(StateCreating)})
	if src != nil {
		m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionRestore, SnapshotID: src.ID, SourceID: src.SandboxID})
	}
	if plan.src != nil {
		src = plan.src
	}
	b, err := m.start(ctx, rec, opts, src, plan)
	if err != nil {
		m.log.Error("create failed", "sandbox_id", id, "err", err)
		m.nets.detach(id)
		m.reg.remove(id)
		removeDir(rec.Dir, m.log)
		if b != nil {
			b.removeCgroup()
		}
		_ = m.setState(context.WithoutCancel(ctx), id, StateFailed, err.Error(), 0)
		return Info{ID: id, State: StateFailed}, fmt.Errorf("sandbox: create: %w", err)
	}
	t0 := time.Now()
	info, err := m.adopt(ctx, b, rec)
	m.log.Debug("create phase", "sandbox_id", id, "phase", "adopt", "took", time.Since(t0))
	return info, err
}

// start makes sandbox rec's network, disk and VM (restoring src, or booting
// and, for plan.capture, capturing the base snapshot) and serves its mounts.
func (m *Manager) start(ctx context.Context, rec store.Sandbox, opts CreateOptions, src *store.Snapshot, plan baseCreate) (*box, error) {
	id := rec.ID
	var err error
	var b *box
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
		b, err = m.restore(ctx, rec, *src, true, netOnce, opts.staged)
		if err != nil && plan.src != nil {
			b, err = m.bootAfterBadBase(ctx, rec, opts, *plan.src, b, err, netOnce)
		}
	default:
		b, err = m.boot(ctx, rec, opts, netOnce)
		if err == nil && plan.capture != "" {
			err = m.bases.captureNew(ctx, b, rec, plan.capture)
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

// adopt makes a booted box a running sandbox: records, TTL, watcher.
func (m *Manager) adopt(ctx context.Context, b *box, rec store.Sandbox) (Info, error) {
	rec.State, rec.VMPID = string(StateRunning), b.vm.PID()
	err := m.opts.Store.PutSandboxVM(ctx, store.SandboxVM{ID: b.id, SnapshotID: b.snapshotID, Overlay: b.overlay, Cwd: b.cwd, User: b.user})
	if err == nil { // the VMM's identity, as the VM has it (adopt.go)
		err = writeVMState(b.dir, vmState{Backend: m.opts.Driver.Name(), Process: b.vm.Process()})
	}
	if err == nil {
		err = m.setState(ctx, b.id, State(rec.State), "", rec.VMPID)
	}
	if err == nil && State(rec.State) != StatePaused {
		err = b.applyGuestLimits(ctx)
	}
	if err != nil {
		m.teardown(b, err)
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

// boot makes the sandbox's disk on opts.BaseImage ("" for hostd's base
// image), starts its VM (on opts.Kernel and Initramfs, if set) and
// connects its agent.
func (m *Manager) boot(ctx context.Context, rec store.Sandbox, opts CreateOptions, netReady func() error) (*box, error) {
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
	ph := newPhases(m.log, rec.ID, "boot")
	if err := disk.CreateOverlay(ctx, base, b.overlay, 0); err != nil {
		return nil, err
	}
	ph.done("overlay")
	if err := ownFiles(b.overlay); err != nil {
		return nil, err
	}
	if err := netReady(); err != nil {
		return nil, err
	}
	ph.done("network_wait")
	vc := m.vmConfig(rec, b.overlay)
	if opts.Kernel != "" {
		vc.Kernel = opts.Kernel
	}
	if opts.Initramfs != "" {
		vc.Initramfs = opts.Initramfs
	}
	cfg, err := m.vmms.place(vc, b)
	if err != nil {
		return nil, err
	}
	ph.done("cgroup")
	vm, err := m.opts.Driver.Start(ctx, cfg)
	if err != nil {
		b.removeCgroup()
		return nil, err
	}
	b.vm = vm
	ph.done("vmm_start") // process spawn and QMP
	if err := b.connect(ctx, m.opts.BootTimeout); err != nil {
		b.removeCgroup()
		return nil, err
	}
	ph.done("agent")                         // kernel, guestinit and the channel handshake
	if err := setClock(ctx, b); err != nil { // see clock.go
		m.log.Warn("guest clock not set", "sandbox_id", b.id, "err", err)
	}
	ph.done("clock")
	ph.guest(cfg.ConsoleLog)
	return b, nil
}

// newBox makes the box of a VM of sandbox rec, before the VM exists.
func (m *Manager) newBox(ctx context.Context, rec store.Sandbox) *box {
	e := m.reg.get(rec.ID)
	return &box{id: rec.ID, dir: rec.Dir, log: m.log, gone: make(chan struct{}), dialing: make(chan struct{}, 1), meter: &e.meter, spawn: m.spawn,
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

// watch marks the sandbox failed and cleans up if its VM dies on its own.
func (m *Manager) watch(b *box) {
	select {
	case <-b.vm.Done():
	case <-b.gone:
		return
	}
	err := b.vm.Wait(context.Background())
	why := fmt.Errorf("%w: vm exited unexpectedly (%v)", ErrNotRunning, err)
	if !m.reg.forget(b) {
		return // deleted meanwhile
	}
	m.log.Warn("sandbox vm died", "sandbox_id", b.id, "vm_pid", b.vm.PID(), "err", err)
	// The disk stays: the sandbox is failed, its overlay, paused state and
	// console log are kept until it is deleted (see README, "A failed
	// sandbox").
	m.stopBox(b, why)
	_ = m.setState(context.Background(), b.id, StateFailed, why.Error(), 0)
}

// teardown ends everything a live sandbox owns: streams, VM, files.
func (m *Manager) teardown(b *box, why error) {
	m.stopBox(b, why)
	removeDir(b.dir, m.log.With("sandbox_id", b.id))
}

// stopBox ends what a live sandbox holds on the host (streams, VM, cgroup,
// network) but leaves its directory.
func (m *Manager) stopBox(b *box, why error) {
	b.end(why)
	b.closeAgent()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	log := m.log.With("sandbox_id", b.id, "vm_pid", b.vm.PID())
	if err := b.vm.Stop(ctx); err != nil {
		log.Error("stop vm", "err", err)
	}
	b.settle()
	b.removeCgroup()
	_ = os.Remove(filepath.Join(b.dir, vmStateFile))
	m.nets.detach(b.id)
}

func removeDir(dir string, log *slog.Logger) {
	if err := os.RemoveAll(dir); err != nil {
		log.Error("remove sandbox dir", "dir", dir, "err", err)
	}
}

// Delete stops a sandbox and removes everything it owned. Running execs end
// with ErrDeleted.
func (m *Manager) Delete(ctx context.Context, id string) error {
	rec, err := m.opts.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return err
	}
	e := m.reg.get(id)
	e.ttl.disarm()
	e.mu.Lock()
	b := e.box
	e.box = nil
	e.mu.Unlock()
	if b != nil {
		b.op.Lock() // let a running snapshot or pause finish
		_ = m.setState(ctx, id, StateStopping, "", b.vm.PID())
		fault.Point("delete:stopping")
		m.teardown(b, ErrDeleted)
		b.op.Unlock()
	} else {
		removeDir(rec.Dir, m.log.With("sandbox_id", id))
		m.nets.detach(id)
	}
	ctx = context.WithoutCancel(ctx)
	fault.Point("delete:torn-down")
	m.reg.remove(id)
	if err := errors.Join(m.opts.Store.DeleteSandboxVM(ctx, id), m.opts.Store.DeleteSandboxLimits(ctx, id), m.opts.Store.DeleteSandbox(ctx, id)); err != nil {
		return err
	}
	m.nets.forget(context.WithoutCancel(ctx), id)
	m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionState, State: string(StateDeleted)})
	m.snaps.Collect(ctx)
	m.log.Info("sandbox deleted", "sandbox_id", id)
	return nil
}

// Get describes a sandbox.
func (m *Manager) Get(ctx context.Context, id string) (Info, error) {
	rec, err := m.opts.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Info{}, err
	}
	return m.withLimits(ctx, infoOf(rec)), nil
}

// List describes every sandbox.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	recs, err := m.opts.Store.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(recs))
	for _, r := range recs {
		out = append(out, m.withLimits(ctx, infoOf(r)))
	}
	return out, nil
}

func infoOf(r store.Sandbox) Info {
	return Info{ID: r.ID, State: State(r.State), VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, Env: r.Env,
		TimeoutS: r.TimeoutS, Metadata: r.Metadata, CreatedAt: r.CreatedAt, Error: r.Error, VMPID: r.VMPID}
}

// live returns sandbox id's running box, or an error wrapping ErrNotFound
// (no such sandbox) or ErrNotRunning (it exists but does not run).
func (m *Manager) live(ctx context.Context, id string) (*box, error) {
	if b := m.reg.live(id); b != nil {
		b.touch()
		return b, nil
	}
	rec, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, id, rec.State)
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
