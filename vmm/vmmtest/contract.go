package vmmtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/vmm"
)

// Target is what RunContract checks: a driver and the configs of its VMs.
type Target struct {
	// NewDriver returns the driver under test.
	NewDriver func(t *testing.T) vmm.Driver
	// Config returns a fresh config for a VM named id, in its own Dir, with
	// a root disk over base (the default image when base is empty).
	Config func(t testing.TB, id, base string) vmm.Config
	// RealGuest runs the checks that need a real guest: its files and
	// processes survive a snapshot, restores are isolated, disk writes land
	// in the switched overlay. Disks are then real qcow2 files.
	RealGuest bool
}

// FakeConfig is a Target.Config for drivers that open no guest files (the
// FakeDriver): paths in a fresh directory, an empty root disk file.
func FakeConfig(t testing.TB, id, _ string) vmm.Config {
	t.Helper()
	dir := ShortTempDir(t)
	root := filepath.Join(dir, "root.qcow2")
	if err := os.WriteFile(root, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return vmm.Config{
		ID: id, Dir: dir, Kernel: filepath.Join(dir, "vmlinux"), Initramfs: filepath.Join(dir, "initramfs"),
		Cmdline: "agentbox.hostname=" + id, VCPUs: 1, MemoryMiB: 256,
		Disks: []vmm.Disk{{Path: root}}, ConsoleLog: filepath.Join(dir, "console.log"),
	}
}

// RunContract checks the vmm.Driver and vmm.VM contract on tgt: Started
// before the guest runs (and its error failing the start), a missing disk
// failing the start with its name, Dial waiting for
// the guest and refusing an unserved port, exec over the agent channel,
// concurrent streams, pause and resume, snapshot and a paused restore, the
// optional staged restore and disk switch, config validation (Net), and Stop, gracefully and
// with an ended ctx.
func RunContract(t *testing.T, tgt Target) {
	d := tgt.NewDriver(t)
	vm, c, cfg := boot(t, tgt, d, "conformance", "")
	ctx := context.Background()

	t.Run("health", func(t *testing.T) {
		h, err := c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Hostname != "conformance" || h.Kernel == "" {
			t.Errorf("got hostname %q kernel %q, want conformance and a kernel", h.Hostname, h.Kernel)
		}
	})
	t.Run("exec over the channel", func(t *testing.T) { checkExec(t, c) })
	t.Run("concurrent streams", func(t *testing.T) { checkConcurrentDials(t, vm) })
	t.Run("port without listener", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := vm.Dial(dctx, 4099); !errors.Is(err, channel.ErrRefused) {
			t.Errorf("got %v, want ErrRefused", err)
		}
	})
	t.Run("dial with an ended ctx", func(t *testing.T) {
		dctx, cancel := context.WithCancel(ctx)
		cancel()
		if conn, err := vm.Dial(dctx, channel.AgentPort); err == nil {
			conn.Close()
			t.Error("Dial with a cancelled ctx succeeded")
		}
	})
	t.Run("invalid config", func(t *testing.T) { checkInvalidConfig(t, tgt, d) })
	t.Run("started fails the start", func(t *testing.T) { checkStartedError(t, tgt, d) })
	t.Run("missing disk fails the start", func(t *testing.T) { checkMissingDisk(t, tgt, d) })
	t.Run("pause and resume", func(t *testing.T) { checkPauseResume(t, vm, c) })
	t.Run("snapshot and restore", func(t *testing.T) { checkSnapshot(t, tgt, d, vm, c, cfg) })
	t.Run("staged restore", func(t *testing.T) { checkStagedRestore(t, tgt, d, vm, c, cfg) })
	t.Run("disk switch", func(t *testing.T) { checkDiskSwitch(t, tgt, vm, c, cfg) })
	t.Run("release and adopt", func(t *testing.T) {
		if avm := checkAdopt(t, d, vm, c, cfg); avm != nil {
			vm = avm
		}
	})
	t.Run("stop", func(t *testing.T) { checkStopEndedCtx(t, vm) })
}

// checkAdopt: a released VM keeps running with its guest's exec sessions,
// Adopt by its Process gives a VM that dials the agent again and finds the
// session's whole output; Adopt of a process that is not the VMM (another
// start time) is ErrNotRunning. A backend whose Adopt is ErrUnsupported
// skips. It returns the adopted VM (nil when skipped before the release).
func checkAdopt(t *testing.T, d vmm.Driver, vm vmm.VM, c *agentclient.Client, cfg vmm.Config) vmm.VM {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := d.Adopt(ctx, cfg, vmm.Process{}); errors.Is(err, vmm.ErrUnsupported) {
		t.Skip("the backend cannot adopt a VMM (vmm.ErrUnsupported)")
	} else if !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("adopt of pid 0: got %v, want ErrNotRunning", err)
	}
	id, err := c.Start(ctx, agentclient.Command{Shell: "echo before; sleep 2; echo after"})
	if err != nil {
		t.Fatal(err)
	}
	p := vm.Process()
	if err := vm.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	c.Close()
	if _, err := vm.Dial(ctx, channel.AgentPort); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("dial of a released vm: got %v, want ErrNotRunning", err)
	}
	if _, err := d.Adopt(ctx, cfg, vmm.Process{PID: p.PID, StartTime: p.StartTime + 1}); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("adopt with another start time: got %v, want ErrNotRunning", err)
	}
	avm, err := d.Adopt(ctx, cfg, p)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if avm.PID() != p.PID || avm.Process() != p {
		t.Errorf("adopted pid %d (%v), want %v", avm.PID(), avm.Process(), p)
	}
	conn, err := avm.Dial(ctx, channel.AgentPort)
	if err != nil {
		t.Fatalf("dial the adopted vm: %v", err)
	}
	ac := agentclient.New(conn)
	defer ac.Close()
	var out bytes.Buffer
	exit, err := ac.Follow(ctx, id, 0, func(o agentclient.Output) error { out.Write(o.Data); return nil })
	if err != nil || exit.Code != 0 || out.String() != "before\nafter\n" {
		t.Errorf("the session across the adoption: got %q exit %v err %v, want before and after", out.String(), exit.Code, err)
	}
	if err := avm.Pause(ctx); err != nil {
		t.Errorf("pause the adopted vm: %v", err)
	} else if err := avm.Resume(ctx); err != nil {
		t.Errorf("resume the adopted vm: %v", err)
	}
	return avm
}

// checkInvalidConfig: a config that fails Validate (here a Net without a
// tap) starts nothing and fails with ErrInvalidConfig.
func checkInvalidConfig(t *testing.T, tgt Target, d vmm.Driver) {
	cfg := tgt.Config(t, "bad-net", "")
	cfg.Net = &vmm.Net{MAC: "02:00:00:00:00:01"}
	called := false
	cfg.Started = func(int) error { called = true; return nil }
	vm, err := d.Start(context.Background(), cfg)
	if err == nil {
		_ = vm.Stop(context.Background())
	}
	if !errors.Is(err, vmm.ErrInvalidConfig) || called {
		t.Errorf("got %v (Started called: %v), want ErrInvalidConfig and no Started", err, called)
	}
}

// checkStartedError: an error from Started fails Start with that error and
// leaves no VMM process with the pid Started was given.
func checkStartedError(t *testing.T, tgt Target, d vmm.Driver) {
	cfg := tgt.Config(t, "started-fails", "")
	errHook := errors.New("no cgroup for you")
	pid := 0
	cfg.Started = func(p int) error { pid = p; return errHook }
	vm, err := d.Start(context.Background(), cfg)
	if err == nil {
		_ = vm.Stop(context.Background())
		t.Fatal("Start succeeded although Started failed")
	}
	if !errors.Is(err, errHook) {
		t.Errorf("got %v, want the Started error", err)
	}
	if pid <= 0 {
		t.Fatalf("Started got pid %d", pid)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after the failed start (kill 0: %v)", pid, err)
	}
}

// checkMissingDisk: a Start whose root disk file is missing fails, with an
// error that names the file, once the VMM has refused it: not at the end of
// the ctx (long here, so that a driver that waits it out fails on its
// error's words, not on time).
func checkMissingDisk(t *testing.T, tgt Target, d vmm.Driver) {
	cfg := tgt.Config(t, "missing-disk", "")
	cfg.Disks[0].Path = filepath.Join(cfg.Dir, "missing-root.qcow2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	vm, err := d.Start(ctx, cfg)
	if err == nil {
		_ = vm.Stop(context.Background())
		t.Fatal("Start succeeded without its root disk")
	}
	if !strings.Contains(err.Error(), "missing-root.qcow2") || ctx.Err() != nil {
		t.Errorf("got %v, want an error naming missing-root.qcow2", err)
	}
}

// checkDiskSwitch: a VM that implements vmm.DiskSwitcher moves onto a new
// overlay over its current disk and goes on serving; with a real guest,
// writes after the switch land in the new overlay.
func checkDiskSwitch(t *testing.T, tgt Target, vm vmm.VM, c *agentclient.Client, cfg vmm.Config) {
	sw, ok := vm.(vmm.DiskSwitcher)
	if !ok {
		t.Skip("the driver's VMs have no disk switch (callers copy the overlay)")
	}
	ctx := context.Background()
	cur := cfg.Disks[0].Path
	next := filepath.Join(cfg.Dir, "root-next.qcow2")
	if tgt.RealGuest {
		if err := disk.CreateOverlay(ctx, cur, next, 0); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(next, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sw.SwitchDisk(ctx, 0, next); err != nil {
		t.Fatalf("switch disk: %v", err)
	}
	before, err := os.Stat(next)
	if err != nil {
		t.Fatal(err)
	}
	if tgt.RealGuest {
		runCmd(t, c, agentclient.Command{Shell: "head -c 4194304 /dev/urandom > /root/after-switch; sync"})
		if after, err := os.Stat(next); err != nil || after.Size() <= before.Size() {
			t.Errorf("the new overlay did not grow with the guest's writes (%v)", err)
		}
	}
	if out := runCmd(t, c, agentclient.Command{Argv: []string{"echo", "switched"}}); out.stdout != "switched\n" {
		t.Errorf("after the switch: got %q", out.stdout)
	}
	if err := sw.SwitchDisk(ctx, 5, next); err == nil {
		t.Error("switching a disk the VM does not have succeeded")
	}
}

// checkStop: Stop with time enough returns nil once the process is gone;
// then every call is ErrNotRunning and Stop again returns at once.
func checkStop(t *testing.T, vm vmm.VM) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pid := vm.PID()
	if err := vm.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case <-vm.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	checkGone(t, vm, pid)
	if err := vm.Stop(ctx); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// checkStopEndedCtx: Stop with an ended ctx returns (ctx's error or nil)
// and the VM still ends: Done closes, the process is gone.
func checkStopEndedCtx(t *testing.T, vm vmm.VM) {
	pid := vm.PID()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := vm.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("stop with an ended ctx: got %v, want nil or context.Canceled", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	_ = vm.Wait(wctx)
	select {
	case <-vm.Done():
	default:
		t.Fatal("the VM did not end after a Stop with an ended ctx")
	}
	checkGone(t, vm, pid)
	if err := vm.Stop(wctx); err != nil {
		t.Errorf("stop after the end: %v", err)
	}
}

func checkGone(t *testing.T, vm vmm.VM, pid int) {
	t.Helper()
	ctx := context.Background()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Stop (kill 0: %v)", pid, err)
	}
	if _, err := vm.Dial(ctx, channel.AgentPort); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("dial after stop: got %v, want ErrNotRunning", err)
	}
	if err := vm.Pause(ctx); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("pause after stop: got %v, want ErrNotRunning", err)
	}
	if sw, ok := vm.(vmm.DiskSwitcher); ok {
		if err := sw.SwitchDisk(ctx, 0, "/nonexistent"); !errors.Is(err, vmm.ErrNotRunning) {
			t.Errorf("switch disk after stop: got %v, want ErrNotRunning", err)
		}
	}
}
