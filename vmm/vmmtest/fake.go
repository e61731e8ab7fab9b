package vmmtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

// FakeDriver is an in-process vmm.Driver for unit tests of what drives VMs
// (hostd's manager). Its VMs run no VMM process and need no guest assets:
// Dial(ctx, channel.AgentPort) reaches the real guestinit agent (Exec and
// Files services) served in this process over net.Pipe, so commands run as
// real host processes, and file calls act on the host's filesystem. The
// System service answers Health with the VM's hostname and only records
// SetTime, Reseed, SetIdentity, Freeze and Thaw (see FakeVM.SystemCalls):
// they would change the host. Dial(ctx, channel.PortForwardPort) is a
// working port-forward stream to a TCP port on the host's 127.0.0.1, and
// Dial(ctx, channel.FilesPort) a file stream of the real agent. Any other
// port is refused (channel.ErrRefused).
//
// The hooks (FailNextStart, SetStartDelay, FakeVM.Die, ...) let a test make
// the VMM fail or die; FakeVM.ReplaceAgent puts a test's own (hostile)
// guest on a port in the agent's place. A FakeDriver is safe for concurrent use.
type FakeDriver struct {
	opts FakeOptions

	mu          sync.Mutex
	startDelay  time.Duration
	bootDelay   time.Duration
	failStart   error
	failRestore error
	failSnap    error
	identityErr error
	starts      int
	restores    int
	early       int
	holdStages  int
	staged      chan struct{} // a send per StageRestore, for holdStages
	vms         []*FakeVM
}

// FakeOptions configures a FakeDriver. The zero value works.
type FakeOptions struct {
	// Name is the driver's Name (default "fake").
	Name string
	// Logger receives the in-process agent's logs (default: discarded).
	Logger *slog.Logger
	// StartDelay is how long Start and Restore take (bounded by their ctx).
	StartDelay time.Duration
	// BootDelay is how long after Start (or after the Resume of a restored
	// VM) the agent takes to answer: until then Dial waits, as on a booting
	// guest.
	BootDelay time.Duration
	// CheckDisks makes Start and Restore fail, as a VMM does, when a disk
	// file is missing: the error wraps vmm.ErrNotRunning and names the
	// file. Off, the disks are not looked at (callers with no disk files).
	CheckDisks bool
}

// NewFakeDriver returns a FakeDriver.
func NewFakeDriver(opts FakeOptions) *FakeDriver {
	if opts.Name == "" {
		opts.Name = "fake"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &FakeDriver{opts: opts, startDelay: opts.StartDelay, bootDelay: opts.BootDelay, staged: make(chan struct{}, 64)}
}

var _ vmm.Driver = (*FakeDriver)(nil)

// fakePIDs hands out fake VMM pids above Linux's largest pid_max (2^22),
// so that no real process ever has one: kill(pid, 0) is ESRCH for them.
var fakePIDs atomic.Int64

func nextFakePID() int { return 1<<22 + int(fakePIDs.Add(1)) }

// fakeStateFile is what a FakeVM's Snapshot writes, and Restore reads.
const fakeStateFile = "fake-vm.json"

// fakeState is the content of fakeStateFile.
type fakeState struct {
	Driver   string `json:"driver"`
	SourceID string `json:"source_id"`
	Hostname string `json:"hostname"`
}

// Name is the driver's name (FakeOptions.Name).
func (d *FakeDriver) Name() string { return d.opts.Name }

// FailNextStart makes the next Start return err (wrapped) without a VM.
func (d *FakeDriver) FailNextStart(err error) { d.set(func() { d.failStart = err }) }

// FailNextRestore makes the next Restore return err (wrapped) without a VM.
func (d *FakeDriver) FailNextRestore(err error) { d.set(func() { d.failRestore = err }) }

// FailNextSnapshot makes the next Snapshot of any of d's VMs return err
// (wrapped) and write nothing.
func (d *FakeDriver) FailNextSnapshot(err error) { d.set(func() { d.failSnap = err }) }

// SetStartDelay changes FakeOptions.StartDelay for later calls.
func (d *FakeDriver) SetStartDelay(t time.Duration) { d.set(func() { d.startDelay = t }) }

// SetBootDelay changes FakeOptions.BootDelay for later VMs.
func (d *FakeDriver) SetBootDelay(t time.Duration) { d.set(func() { d.bootDelay = t }) }

// RefuseIdentity makes the agents of later VMs answer SetIdentity with err
// (nil: they accept it again).
func (d *FakeDriver) RefuseIdentity(err error) { d.set(func() { d.identityErr = err }) }

// Starts is the number of Start calls so far, failed ones included.
func (d *FakeDriver) Starts() int { d.mu.Lock(); defer d.mu.Unlock(); return d.starts }

// Restores is the number of Restore calls so far, failed ones included.
func (d *FakeDriver) Restores() int { d.mu.Lock(); defer d.mu.Unlock(); return d.restores }

// StagedEarly counts the StageRestores that found their snapshot planned
// and not written yet: restores staged while their source was captured.
func (d *FakeDriver) StagedEarly() int { d.mu.Lock(); defer d.mu.Unlock(); return d.early }

// VMs returns every VM d has started or restored, oldest first (stopped
// ones included).
func (d *FakeDriver) VMs() []*FakeVM {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*FakeVM(nil), d.vms...)
}

// Last returns the VM d started or restored last, or nil.
func (d *FakeDriver) Last() *FakeVM {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.vms) == 0 {
		return nil
	}
	return d.vms[len(d.vms)-1]
}

func (d *FakeDriver) set(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

// take returns *p and clears it.
func take(mu *sync.Mutex, p *error) error {
	mu.Lock()
	defer mu.Unlock()
	err := *p
	*p = nil
	return err
}

// Start "boots" cfg: it validates cfg, waits StartDelay (bounded by ctx),
// calls cfg.Started with the VM's fake pid before the guest runs (an error
// there ends the VM and fails Start), writes a line to cfg.ConsoleLog, and
// returns a running VM whose agent answers after BootDelay. cfg's kernel,
// disks and Net are not opened.
func (d *FakeDriver) Start(ctx context.Context, cfg vmm.Config) (vmm.VM, error) {
	d.set(func() { d.starts++ })
	if err := take(&d.mu, &d.failStart); err != nil {
		return nil, fmt.Errorf("vmmtest: fake start: %w", err)
	}
	return d.launch(ctx, cfg, "", fakeState{Hostname: hostnameOf(cfg.Cmdline, cfg.ID)})
}

// Restore "restores" a snapshot that a FakeVM's Snapshot wrote into dir
// (anything else is vmm.ErrUnsupported), like Start otherwise. The VM
// starts paused: its agent answers only after Resume (and BootDelay). It
// is a fresh agent: processes and sessions of the snapshotted VM are not
// carried over; its hostname is.
func (d *FakeDriver) Restore(ctx context.Context, cfg vmm.Config, dir string) (vmm.VM, error) {
	return d.restore(ctx, cfg, dir, fakeStateFile)
}

// restore counts a restore, fails it when FailNextRestore asked, and
// launches a paused VM from the fakeState in file name of dir.
func (d *FakeDriver) restore(ctx context.Context, cfg vmm.Config, dir, name string) (*FakeVM, error) {
	d.set(func() { d.restores++ })
	if err := take(&d.mu, &d.failRestore); err != nil {
		return nil, fmt.Errorf("vmmtest: fake restore: %w", err)
	}
	st, err := d.readState(dir, name)
	if err != nil {
		return nil, err
	}
	return d.launch(ctx, cfg, dir, st)
}

// Adopt takes back a VM of d that was released (FakeVM.Release) and still
// runs, found by its fake pid and start time; anything else is
// vmm.ErrNotRunning. It is the same *FakeVM, whose guest kept its sessions.
func (d *FakeDriver) Adopt(ctx context.Context, cfg vmm.Config, p vmm.Process) (vmm.VM, error) {
	for _, vm := range d.VMs() {
		if vm.Process() != p {
			continue
		}
		vm.mu.Lock()
		rel := vm.released
		vm.released = false
		vm.mu.Unlock()
		if !rel || vm.running() != nil {
			break
		}
		return vm, nil
	}
	return nil, fmt.Errorf("vmmtest: adopt %s: no released fake vm %d: %w", cfg.ID, p.PID, vmm.ErrNotRunning)
}

func (d *FakeDriver) launch(ctx context.Context, cfg vmm.Config, from string, st fakeState) (*FakeVM, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := d.checkDisks(cfg.Disks); err != nil {
		return nil, err
	}
	d.mu.Lock()
	delay, boot, identityErr := d.startDelay, d.bootDelay, d.identityErr
	d.mu.Unlock()
	if err := sleepCtx(ctx, delay); err != nil {
		return nil, fmt.Errorf("vmmtest: fake start: %w", err)
	}
	g, err := newFakeGuest(st.Hostname, d.opts.Logger)
	if err != nil {
		return nil, err
	}
	g.system.identityErr = identityErr
	vm := &FakeVM{
		d: d, cfg: cfg, pid: nextFakePID(), guest: g, restoredFrom: from, bootDelay: boot,
		disks: append([]vmm.Disk(nil), cfg.Disks...), done: make(chan struct{}),
	}
	if from != "" {
		g.gate.pause()
	}
	if cfg.Started != nil {
		if err := cfg.Started(vm.pid); err != nil {
			vm.end(errors.New("vmmtest: killed after Started failed"))
			<-vm.done
			return nil, fmt.Errorf("vmmtest: fake start: started hook: %w", err)
		}
	}
	if from == "" {
		vm.ready = time.Now().Add(boot)
	}
	if err := os.WriteFile(cfg.ConsoleLog, fmt.Appendf(nil, "fake vm %s (pid %d) running\n", cfg.ID, vm.pid), 0o644); err != nil {
		vm.end(err)
		<-vm.done
		return nil, fmt.Errorf("vmmtest: console log: %w", err)
	}
	d.mu.Lock()
	d.vms = append(d.vms, vm)
	d.mu.Unlock()
	return vm, nil
}

// checkDisks fails with vmm.ErrNotRunning, as a VMM that exits at its
// start, for a disk file that is missing (CheckDisks).
func (d *FakeDriver) checkDisks(disks []vmm.Disk) error {
	if !d.opts.CheckDisks {
		return nil
	}
	for i, disk := range disks {
		if _, err := os.Stat(disk.Path); err != nil {
			return fmt.Errorf("vmmtest: fake vmm exited at its start: disk %d: %v: %w", i, err, vmm.ErrNotRunning)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
