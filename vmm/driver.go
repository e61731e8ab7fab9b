// Package vmm defines the narrow interface between hostd and a virtual machine
// monitor. Each backend (vmm/qemu, vmm/cloudhypervisor) runs one VMM process per
// sandbox and owns the agent channel to the guest; nothing above this package
// knows which transport carries the agent's bytes. The doc comment of each
// method says what every backend does; vmm/vmmtest.RunContract checks it.
//
// Lifetime: a VMM process outlives the hostd that started it (its own
// session, no parent-death signal; see StartProcess, the one place that
// decides it). VM.Release lets go of a VM without ending it, and a later
// hostd reconnects with Driver.Adopt, finding the process by its Process
// (pid and start time). ctx arguments bound a call, never a VM's life.
package vmm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
)

// Sentinel errors shared by every backend.
var (
	// ErrNotRunning is returned by calls on a VM whose process has exited.
	ErrNotRunning = errors.New("vmm: not running")
	// ErrUnsupported is returned when a backend cannot do what was asked here
	// (for example a snapshot made by another backend).
	ErrUnsupported = errors.New("vmm: unsupported")
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("vmm: invalid config")
	// ErrBinaryNotFound is returned when the backend's VMM binary is missing.
	ErrBinaryNotFound = errors.New("vmm: binary not found")
)

// Accel names a CPU accelerator.
type Accel string

// Accelerators. AccelAuto lets the backend probe.
const (
	AccelAuto Accel = ""
	AccelKVM  Accel = "kvm"
	AccelTCG  Accel = "tcg"
)

// Disk is a block device given to the guest. The first disk of a Config is the
// root disk (/dev/vda in the guest).
type Disk struct {
	// Path is the image file (qcow2 unless Raw).
	Path string
	// ReadOnly attaches the disk read-only.
	ReadOnly bool
	// Raw marks a raw image instead of qcow2.
	Raw bool
	// BpsTotal caps the disk's bandwidth, reads and writes together, in
	// bytes per second (0 = none).
	BpsTotal int64
}

// Config describes one VM. All paths are absolute.
type Config struct {
	// ID names the VM in logs and on the host (the sandbox id).
	ID string
	// Dir is a directory owned by this VM for its sockets and state. It must exist.
	Dir string
	// Kernel is a PVH vmlinux ELF.
	Kernel string
	// Initramfs holds guestinit and the kernel modules it loads.
	Initramfs string
	// Cmdline is appended to the backend's own kernel arguments.
	Cmdline string
	// VCPUs and MemoryMiB size the guest.
	VCPUs     int
	MemoryMiB int
	// Disks are attached in order; the first is the root disk.
	Disks []Disk
	// ConsoleLog receives the guest's serial console.
	ConsoleLog string
	// Started, if set, is called once by Start and Restore with the VMM's
	// pid right after the process is created, before any guest runs (QEMU:
	// before QMP connects; Cloud Hypervisor: before vm.create and vm.boot,
	// or vm.restore). hostd puts the process into its cgroup there. An
	// error stops the VMM and fails the start with that error (wrapped).
	Started func(pid int) error
	// Net, if set, gives the guest one virtio-net NIC on a tap device.
	// Nil means no network device at all.
	Net *Net
	// OwnMemory, for Restore, gives the VM a private copy of the
	// snapshot's memory instead of mapping it copy-on-write: its start
	// copies the snapshot's memory, and shares none of it with other VMs
	// restored from it, but the VM's own snapshots keep memory as a file
	// that their restores share (QEMU: a VM on a private mapping can only
	// migrate its RAM in the stream). hostd sets it for restores of its
	// base snapshot, whose sandboxes are forked like booted ones. Backends
	// without the distinction ignore it.
	OwnMemory bool
	// RunAs, if set, is the unprivileged user and group the VMM process
	// drops to once it has opened its devices, disks, memory and sockets
	// (QEMU -runas uid:gid). What it opens later (the new overlay of
	// DiskSwitcher.SwitchDisk) must be reachable by that user. Backends
	// that cannot drop refuse it with ErrUnsupported.
	RunAs *User
}

// User is a numeric uid and gid, not looked up in the host's user
// database.
type User struct {
	UID, GID int
}

// String is "uid:gid".
func (u User) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// Net is the guest's NIC: a tap device opened by the caller (in the
// sandbox's network namespace) and handed to the VMM as a file descriptor.
type Net struct {
	// Tap is an open tap queue; the driver passes it to the VMM process and
	// does not close it.
	Tap *os.File
	// MAC is the guest NIC's address (aa:bb:cc:dd:ee:ff).
	MAC string
	// BpsTotal caps the NIC's bandwidth in bytes per second, each direction
	// on its own (0 = none). Cloud Hypervisor applies it with its own rate
	// limiter; QEMU ignores it, because hostd shapes the tap with tc for
	// every backend (hostd/netns.SetRate).
	BpsTotal int64
}

// Validate reports the first problem with c, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: empty ID", ErrInvalidConfig)
	case c.Dir == "":
		return fmt.Errorf("%w: empty Dir", ErrInvalidConfig)
	case c.Kernel == "":
		return fmt.Errorf("%w: empty Kernel", ErrInvalidConfig)
	case c.VCPUs < 1:
		return fmt.Errorf("%w: vcpus %d < 1", ErrInvalidConfig, c.VCPUs)
	case c.MemoryMiB < 64:
		return fmt.Errorf("%w: memory %d MiB < 64", ErrInvalidConfig, c.MemoryMiB)
	case c.ConsoleLog == "":
		return fmt.Errorf("%w: empty ConsoleLog", ErrInvalidConfig)
	case c.Net != nil && (c.Net.Tap == nil || c.Net.MAC == ""):
		return fmt.Errorf("%w: Net needs Tap and MAC", ErrInvalidConfig)
	case c.RunAs != nil && (c.RunAs.UID < 1 || c.RunAs.GID < 1):
		return fmt.Errorf("%w: RunAs %s is not an unprivileged user", ErrInvalidConfig, c.RunAs)
	}
	return nil
}

// Driver starts VMs of one backend.
type Driver interface {
	// Name is the backend's name ("qemu", "cloud-hypervisor").
	Name() string
	// Start validates cfg (ErrInvalidConfig), launches a VMM process, calls
	// cfg.Started, and boots cfg's kernel. It returns once the VMM runs the
	// guest; the guest agent may not answer yet (VM.Dial waits for it). ctx
	// bounds the launch only, never the VM's life.
	Start(ctx context.Context, cfg Config) (VM, error)
	// Restore launches a VMM process from a snapshot that a VM of this backend
	// wrote with VM.Snapshot into dir, calling cfg.Started before the restored
	// guest exists. The VM starts paused: its guest answers nothing until
	// Resume. A directory that is not a snapshot of this backend is refused
	// with ErrUnsupported.
	Restore(ctx context.Context, cfg Config, dir string) (VM, error)
	// Adopt reconnects to a running VMM process that a VM of this backend
	// started (usually under an earlier hostd, which Released it or died):
	// proc identifies the process (VM.Process), cfg is the Config it was
	// started or restored with (its Dir holds the VMM's sockets; Started
	// and Net are ignored). The adopted VM is what Start returned: Dial,
	// Pause, Snapshot, Stop, Wait and Done work on it (Wait returns nil or
	// an error without the exit status, which only the VMM's parent sees).
	// A process that is gone, or another one now has the pid, is
	// ErrNotRunning; a backend that cannot adopt returns ErrUnsupported.
	// The VMM is left running when Adopt fails.
	Adopt(ctx context.Context, cfg Config, proc Process) (VM, error)
}

// VM is one running VMM process.
type VM interface {
	// PID is the VMM process id.
	PID() int
	// Process identifies the VMM process for a later Adopt.
	Process() Process
	// Release closes the host's connections to the VMM (control socket,
	// agent channel, its streams) and leaves the process running, for a
	// later Adopt. Afterwards only PID and Process answer; Done is closed.
	// Release of an exited VM returns nil.
	Release() error
	// Dial opens a new stream to the guest's channel port. It waits (until
	// ctx ends) for a guest that does not answer yet: every backend retries
	// inside Dial until guestinit answers, so the first Dial after Start or
	// Resume is how callers wait for the agent, bounded by ctx. A port that
	// the guest does not serve fails at once with channel.ErrRefused; an
	// exited VM with ErrNotRunning; an ended ctx with its error. Streams are
	// reset by a restore; dial again afterwards.
	Dial(ctx context.Context, port uint32) (net.Conn, error)
	// Pause stops the vCPUs; Resume restarts them.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// Snapshot writes the paused VM's memory and device state into dir (which
	// must exist and be empty, or planned: SnapshotPlanner). Disks are the caller's to freeze. The files
	// may still be in the page cache when it returns: a caller that needs
	// them to outlive a host crash syncs them.
	Snapshot(ctx context.Context, dir string) error
	// Stop ends the VM: a graceful request, then SIGTERM, then SIGKILL, each
	// given a few seconds. When ctx ends, the graceful steps left are skipped
	// and SIGKILL is sent at once. Stop returns nil once the process has been
	// reaped and the VM's files are closed (QEMU and Cloud Hypervisor wait a
	// bounded few seconds for the reap after SIGKILL, whatever ctx); an
	// implementation may instead return ctx.Err() when ctx ended before the
	// reap, Done then closes later. Stop of an exited VM returns nil.
	Stop(ctx context.Context) error
	// Wait blocks until the VMM process exits or ctx ends, and returns the
	// exit error (nil for a clean exit) or ctx.Err().
	Wait(ctx context.Context) error
	// Done is closed once the VMM process has exited.
	Done() <-chan struct{}
}

// DiskSwitcher is the optional disk switch of a VM: a VM that implements it
// can move its running guest onto a new overlay without a copy. A snapshot
// uses it to make the current overlay the snapshot's frozen layer; callers
// of a VM without it (Cloud Hypervisor) copy the overlay file instead,
// while the VM is paused.
type DiskSwitcher interface {
	// SwitchDisk moves the guest's disk index (0 = the root disk) onto
	// overlay, an existing qcow2 file whose backing file is the disk's
	// current file. The current file is read-only to the VMM afterwards:
	// the caller may hard-link it as a frozen layer. On an exited VM it
	// returns ErrNotRunning.
	SwitchDisk(ctx context.Context, index int, overlay string) error
}

// DiskReporter is the optional disk query of a VM: which file the guest's
// disk index (0 = the root disk) is on now, after any SwitchDisk. A hostd
// that re-adopts a VM asks it, since it may have died between a switch and
// recording it.
type DiskReporter interface {
	DiskPath(ctx context.Context, index int) (string, error)
}

// SnapshotPlanner is the optional first half of a VM's Snapshot, which a
// Stager's restores need. A fork uses the two to start its copies' VMMs
// while its parent's state is still being written.
type SnapshotPlanner interface {
	// PlanSnapshot writes into dir (which must exist and be empty) what a
	// restore must know before the snapshot exists: its shape and where its
	// memory will be. The VM must be paused; Snapshot into the same dir
	// then completes the snapshot.
	PlanSnapshot(ctx context.Context, dir string) error
}

// Stager is the optional two-step restore of a Driver.
type Stager interface {
	// StageRestore launches a VMM for the snapshot that a paused VM of this
	// backend is writing into dir: after that VM's PlanSnapshot(dir), and
	// before, during or after its Snapshot(dir). It checks and uses cfg as
	// Restore does, and calls cfg.Started. The VMM waits for Load.
	StageRestore(ctx context.Context, cfg Config, dir string) (StagedVM, error)
}

// StagedVM is a VMM that Stager.StageRestore launched. Until Load returns,
// only PID, Process, Stop, Wait and Done may be called.
type StagedVM interface {
	VM
	// Load restores the snapshot, complete now (its Snapshot returned),
	// into the VM, which is then what Driver.Restore returns: paused. A
	// failed Load stops the VMM.
	Load(ctx context.Context) error
}
