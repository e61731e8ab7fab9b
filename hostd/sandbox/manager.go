package sandbox

import (
	"context"
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
	// MemoryOvercommit and VCPUOvercommit are how many times the host's
	// memory and CPUs the sandboxes may be promised, and MemoryReserveMiB
	// the host memory a new sandbox must leave available (capacity.go;
	// zero: the defaults).
	MemoryOvercommit, VCPUOvercommit float64
	MemoryReserveMiB                 int
	// MaxSandboxes caps the sandboxes the host holds at once (0: none; a
	// fleet host's --fleet-max-sandboxes).
	MaxSandboxes int
	// SnapshotStore, if set, makes every pause durable there (a pause is
	// answered once its state is exported; portable.go), and a resume of a
	// sandbox this host does not hold imports it from there. HostName names
	// this host in the store's refs.
	SnapshotStore SnapshotStore
	HostName      string
	// Durability, if set, is told of every durable pause (a fleet host's
	// fleet store: an idle or TTL pause is recorded there as the API's
	// pauses are by the gateway).
	Durability Durability
}

// Durability records that a sandbox's paused state is durable
// (fleet/store.Store.SetDurable).
type Durability interface {
	SetDurable(ctx context.Context, sandboxID, manifest string, at time.Time) error
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
	pools poolRegistry
	warm  warmPools
	bases *snapshot.BaseCatalog
	// timeouts kills execs past their timeout; takeover takes over an
	// earlier hostd's execs.
	timeouts *execTimeouts
	takeover *takeover
	ttls     *ttls
	vmms     *vmmPlacer
	reaper   *reaper
	nets     netAttachments
	rec      recorderFeed
	// limits resolves requests' limits (it knows the base image's size).
	limits limitPolicy
	// mnts serves the sandboxes' mounts (mounts.go).
	mnts mountSets
	// capacity admits sandboxes by what the host can hold.
	capacity *capacity
	// jail hands out the VMMs' users (jail.go).
	jail *vmmJail
	// port is the snapshot store's side (portable.go; nil without one).
	port *portable
	// services keeps the sandboxes' service records (portservices.go).
	services services

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
	if opts.SnapshotStore != nil {
		m.port = &portable{st: opts.SnapshotStore, host: opts.HostName}
	}
	m.warm = warmPools{pools: &m.pools, store: opts.Store, nets: &m.nets, reg: &m.reg, vms: m, log: opts.Logger, spawn: m.spawn,
		closing: m.closing, dataDir: opts.DataDir, bootTimeout: opts.BootTimeout, summary: opts.Recorder != nil}
	m.bases = snapshot.NewBaseCatalog(basesConfig(opts), opts.Store, snaps, opts.Logger)
	m.warm.bases = m.bases
	m.vmms = &vmmPlacer{backend: opts.Driver.Name(), cgroups: opts.Cgroups, nets: &m.nets, log: opts.Logger}
	m.reaper = newReaper(opts, &m.reg, &m.pools, m.vmms)
	m.timeouts = &execTimeouts{reg: &m.reg, log: opts.Logger, spawn: m.spawn}
	events, _ := opts.Store.(eventLister)
	m.ttls = &ttls{reg: &m.reg, rec: &m.rec, log: opts.Logger, spawn: m.spawn, pause: m.Pause, del: m.Delete,
		onTimeout: func(ctx context.Context, id string) string { return m.limits.of(ctx, id).OnTimeout }}
	m.takeover = &takeover{reg: &m.reg, rec: &m.rec, log: opts.Logger, events: events, timeouts: m.timeouts}
	m.nets = netAttachments{net: opts.Network, reg: &m.reg, log: opts.Logger}
	m.rec = recorderFeed{r: opts.Recorder, reg: &m.reg, spawn: m.spawn, log: opts.Logger}
	m.mnts = newMountSets(opts.Mounts, opts.DataDir)
	m.capacity = newCapacity(opts, m.committed)
	m.capacity.count = m.committedCount
	m.limits = limitPolicy{opts: opts.Limits, keyMaxes: opts.KeyMax, cgroups: opts.Cgroups != nil, store: opts.Store, log: opts.Logger}
	if info, err := disk.Inspect(context.Background(), opts.BaseImage); err == nil {
		m.limits.baseMiB = int(info.VirtualSize >> 20)
	}
	return m, nil
}

// watch marks the sandbox failed and cleans up if its VM dies on its own.
func (m *Manager) watch(b *runningVM) {
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
func (m *Manager) teardown(b *runningVM, why error) {
	m.stopBox(b, why)
	removeDir(b.dir, m.log.With("sandbox_id", b.id))
}

// stopBox ends what a live sandbox holds on the host (streams, VM, cgroup,
// network) but leaves its directory.
func (m *Manager) stopBox(b *runningVM, why error) {
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
	return m.delete(ctx, id, true)
}

// delete is Delete; without forget, the sandbox's objects in the snapshot
// store stay (a release: the sandbox lives on on another host).
func (m *Manager) delete(ctx context.Context, id string, forget bool) error {
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
	if forget {
		m.forgetStored(ctx, id)
	}
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
	info := withDurable(m.withLimits(ctx, infoOf(rec)), rec.Dir)
	info.SnapshotID = m.snapshotOf(ctx, id)
	return info, nil
}

// List describes every sandbox.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	recs, err := m.opts.Store.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(recs))
	for _, r := range recs {
		out = append(out, withDurable(m.withLimits(ctx, infoOf(r)), r.Dir))
	}
	return out, nil
}

func infoOf(r store.Sandbox) Info {
	return Info{ID: r.ID, State: State(r.State), VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, Env: r.Env,
		TimeoutS: r.TimeoutS, Metadata: r.Metadata, CreatedAt: r.CreatedAt, Error: r.Error, VMPID: r.VMPID}
}

// live returns sandbox id's running box, or an error wrapping ErrNotFound
// (no such sandbox) or ErrNotRunning (it exists but does not run).
func (m *Manager) live(ctx context.Context, id string) (*runningVM, error) {
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
