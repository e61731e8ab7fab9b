// Package qemu is the QEMU backend of vmm.Driver: one qemu-system-x86_64
// process per VM, `-M microvm`, driven over QMP. The agent channel is a
// virtio-serial port carrying a yamux multiplexer (QEMU's vhost-user vsock
// cannot be migrated, and migration is how snapshots work); every stream
// starts with the same CONNECT handshake as Cloud Hypervisor's hybrid vsock.
package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

// Files a VM keeps in its Config.Dir.
const (
	qmpSocket   = "qmp.sock"
	agentSocket = "agent.sock"
	// qemuLogFile is QEMU's stdout and stderr, appended to by every launch.
	qemuLogFile = "qemu.log"
)

// Options configure the driver.
type Options struct {
	// Binary is qemu-system-x86_64 (found on PATH when empty).
	Binary string
	// Accel is kvm, tcg, or empty to probe (see Probe).
	Accel vmm.Accel
	// TSCkHz is put on the guest cmdline as tsc_early_khz; 0 reads the host's.
	TSCkHz int
	// Logger receives the driver's logs.
	Logger *slog.Logger
	// TBSizeMiB, if set, bounds TCG's translation cache per VM (-accel
	// tcg,tb-size=N): less host memory per VM, more retranslation.
	TBSizeMiB int
}

// Driver starts QEMU VMs.
type Driver struct {
	bin    string
	accel  vmm.Accel
	tscKHz int
	tbMiB  int
	log    *slog.Logger
}

var _ vmm.Driver = (*Driver)(nil)

// New returns a driver. With no Accel given it uses TCG; call Probe first to
// choose KVM where it really works.
func New(opts Options) (*Driver, error) {
	bin := opts.Binary
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (install Debian's qemu-system-x86)", vmm.ErrBinaryNotFound, bin, err)
	}
	accel := opts.Accel
	if accel == vmm.AccelAuto {
		accel = vmm.AccelTCG
	}
	if accel != vmm.AccelKVM && accel != vmm.AccelTCG {
		return nil, fmt.Errorf("%w: accel %q (want kvm or tcg)", vmm.ErrInvalidConfig, accel)
	}
	khz := opts.TSCkHz
	if khz == 0 {
		if khz, err = HostTSCkHz(); err != nil {
			return nil, err
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Driver{bin: path, accel: accel, tscKHz: khz, log: log, tbMiB: opts.TBSizeMiB}, nil
}

// Name is "qemu".
func (d *Driver) Name() string { return "qemu" }

// Accel is the accelerator the driver uses.
func (d *Driver) Accel() vmm.Accel { return d.accel }

// Start boots a new VM. Its memory is a memfd that QEMU maps shared, so a
// snapshot can copy it out sparsely while the device state goes through
// migration without it (x-ignore-shared).
func (d *Driver) Start(ctx context.Context, cfg vmm.Config) (vmm.VM, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mem, err := newMemfd(cfg.ID, cfg.MemoryMiB)
	if err != nil {
		return nil, err
	}
	defer mem.Close() // the VM keeps its own descriptor
	return d.launch(ctx, cfg, d.args(cfg, sharedMemory(cfg.MemoryMiB)), launchOpts{mem: mem})
}

// cmdline is the guest kernel's command line.
func (d *Driver) cmdline(cfg vmm.Config) string {
	parts := []string{
		"console=ttyS0", "reboot=t", "panic=-1", "quiet", "loglevel=4",
		"cryptomgr.notests", "8250.nr_uarts=1", "random.trust_cpu=on",
		"tsc_early_khz=" + strconv.Itoa(d.tscKHz),
	}
	if cfg.Cmdline != "" {
		parts = append(parts, cfg.Cmdline)
	}
	return strings.Join(parts, " ")
}

// args builds QEMU's argv (without the binary). Socket paths are relative to
// cfg.Dir, QEMU's working directory, to stay clear of the unix path limit;
// disks in cfg.Dir are named relative to it too (paths.go).
// memory is the memory backend's -object value.
func (d *Driver) args(cfg vmm.Config, memory string) []string {
	cpu := "max"
	if d.accel == vmm.AccelKVM {
		cpu = "host"
	}
	accel := string(d.accel)
	if d.accel == vmm.AccelTCG && d.tbMiB > 0 {
		accel += ",tb-size=" + strconv.Itoa(d.tbMiB)
	}
	a := []string{
		"-name", "agentbox-" + cfg.ID,
		"-machine", "microvm,x-option-roms=off,rtc=on,memory-backend=mem",
		"-accel", accel,
		"-cpu", cpu,
		"-smp", strconv.Itoa(cfg.VCPUs),
		"-m", strconv.Itoa(cfg.MemoryMiB) + "M",
		"-object", memory,
		"-nodefaults", "-no-user-config", "-nographic", "-display", "none", "-no-reboot",
		"-sandbox", seccomp(cfg),
		"-kernel", cfg.Kernel,
		"-append", d.cmdline(cfg),
		// append=on: hostd rotates the log by copy and truncate (hostd/sandbox
		// console.go); a writer at its own offset would leave a hole.
		"-chardev", "file,id=console,append=on,path=" + cfg.ConsoleLog,
		"-serial", "chardev:console",
		"-chardev", "socket,id=qmp,fd=" + qmpFD + ",server=on,wait=off",
		"-mon", "chardev=qmp,mode=control",
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "socket,id=agent,path=" + agentSocket + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=agentbox.0",
	}
	if cfg.Initramfs != "" {
		a = append(a, "-initrd", cfg.Initramfs)
	}
	a = append(a, runAsArgs(cfg)...)
	if cfg.Net != nil {
		a = append(a, netArgs(cfg.Net)...)
	}
	for i, disk := range cfg.Disks {
		format := "qcow2"
		if disk.Raw {
			format = "raw"
		}
		drive := fmt.Sprintf("id=disk%d,file=%s,format=%s,if=none,cache=writeback,discard=unmap,detect-zeroes=unmap", i, inDir(cfg.Dir, disk.Path), format)
		if disk.ReadOnly {
			drive += ",readonly=on"
		}
		if disk.BpsTotal > 0 {
			drive += ",throttling.bps-total=" + strconv.FormatInt(disk.BpsTotal, 10)
		}
		a = append(a, "-drive", drive, "-device", fmt.Sprintf("virtio-blk-device,drive=disk%d", i))
	}
	return a
}

// launchOpts are the parts of a launch that differ between boot and restore.
type launchOpts struct {
	// mem is the guest memory memfd (passed as fd 3), or nil when QEMU maps
	// a snapshot's memory file itself.
	mem *os.File
}

// launch starts QEMU with args and connects QMP.
func (d *Driver) launch(ctx context.Context, cfg vmm.Config, args []string, o launchOpts) (*VM, error) {
	cmd := exec.Command(d.bin, args...)
	qmpListener, err := listenQMP(filepath.Join(cfg.Dir, qmpSocket))
	if err != nil {
		return nil, err
	}
	defer qmpListener.Close() // QEMU has its own
	// fd 3 is the memfd, 4 the tap (see netArgs), 5 QMP's listening
	// socket; a nil entry is closed.
	var tap *os.File
	if cfg.Net != nil {
		tap = cfg.Net.Tap
	}
	cmd.ExtraFiles = []*os.File{o.mem, tap, qmpListener}
	cmd.Dir = cfg.Dir // see paths.go
	cmd.SysProcAttr = jailAttr(cfg)
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, qemuLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	var logStart int64
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := vmm.StartProcess(cmd); err != nil {
		return nil, fmt.Errorf("qemu: start: %w", err)
	}
	vm := newVM(cmd, cfg, d.log)
	vm.logStart = logStart
	if cfg.Started != nil {
		if err := cfg.Started(vm.PID()); err != nil {
			return nil, errors.Join(err, vm.Stop(context.WithoutCancel(ctx)))
		}
	}
	if o.mem != nil {
		if vm.mem, err = dupFile(o.mem); err != nil {
			return nil, errors.Join(err, vm.Stop(context.WithoutCancel(ctx)))
		}
	}
	err = vm.connectQMP(ctx)
	if err == nil {
		err = vm.setMigration(ctx)
	}
	if err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return nil, errors.Join(err, vm.Stop(stopCtx), vm.qemuLog())
	}
	d.log.Info("vm started", "sandbox_id", cfg.ID, "vm_pid", vm.PID(), "accel", d.accel)
	return vm, nil
}
