package cloudhypervisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
)

// killReleased ends the VMM of a released VM by its pid, when the test
// ends, and waits until the VM's own reaper has reaped it.
func killReleased(t *testing.T, v *VM) {
	t.Cleanup(func() {
		_ = syscall.Kill(v.PID(), syscall.SIGKILL)
		select {
		case <-v.proc.done:
		case <-time.After(10 * time.Second):
			t.Errorf("pid %d not reaped after SIGKILL", v.PID())
		}
	})
}

// TestReleaseLeavesVMMRunning: after Release the VMM and its sockets are
// still there, every call but PID and Process fails, Done is closed, and
// Stop does nothing.
func TestReleaseLeavesVMMRunning(t *testing.T) {
	d, _ := fakeDriver(t)
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "rel")
	ctx := context.Background()
	vm, err := d.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, vm, "before release")
	conn, err := vm.Dial(ctx, channel.AgentPort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	v := vm.(*VM)
	p := vm.Process()
	if err := vm.Release(); err != nil {
		t.Fatal(err)
	}
	killReleased(t, v)
	select {
	case <-vm.Done():
	default:
		t.Error("Done open after Release")
	}
	if err := vm.Stop(ctx); err != nil {
		t.Errorf("Stop of a released VM: %v", err)
	}
	if !p.Alive() || vm.PID() != p.PID || vm.Process() != p {
		t.Fatalf("the VMM %v is gone after Release (PID %d, Process %v)", p, vm.PID(), vm.Process())
	}
	paths := pathsFor(cfg.Dir)
	for _, s := range []string{paths.api, paths.vsock} {
		if _, err := os.Stat(s); err != nil {
			t.Errorf("socket gone after Release: %v", err)
		}
	}
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("a stream read after Release")
	}
	if _, err := vm.Dial(ctx, channel.AgentPort); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("Dial after Release: got %v, want ErrNotRunning", err)
	}
	if err := vm.Pause(ctx); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("Pause after Release: got %v, want ErrNotRunning", err)
	}
	if err := vm.Wait(ctx); err == nil {
		t.Error("Wait of a released VM returned nil")
	}
	if err := vm.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
}

// TestAdoptRefusesOtherProcesses: a VMM that is gone, a pid with another
// start time, and a live process that is not the VM's VMM are
// ErrNotRunning.
func TestAdoptRefusesOtherProcesses(t *testing.T) {
	d, _ := fakeDriver(t)
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "gone")
	ctx := context.Background()
	vm, err := d.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := vm.Process()
	stopVM(t, vm)
	if err := vm.Release(); err != nil {
		t.Errorf("Release of a stopped VM: %v", err)
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	other, err := vmm.Identify(sleep.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]vmm.Process{
		"exited":             p,
		"another start time": {PID: other.PID, StartTime: other.StartTime + 1},
		"not its vmm":        other,
	} {
		_, err := d.Adopt(ctx, cfg, q)
		t.Logf("%s: %v", name, err)
		if !errors.Is(err, vmm.ErrNotRunning) {
			t.Errorf("%s: got %v, want ErrNotRunning", name, err)
		}
	}
	if !other.Alive() {
		t.Error("a failed Adopt ended the process")
	}
}

// TestAdoptWithoutGuest: a VMM that runs no VM (its hostd died before the
// boot) is not adopted, and is left running.
func TestAdoptWithoutGuest(t *testing.T) {
	d, _ := fakeDriver(t)
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "noguest")
	ctx := context.Background()
	v, err := d.launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Release(); err != nil {
		t.Fatal(err)
	}
	killReleased(t, v)
	if _, err := d.Adopt(ctx, cfg, v.Process()); !errors.Is(err, errNoGuest) {
		t.Errorf("got %v, want errNoGuest", err)
	}
	if !v.Process().Alive() {
		t.Error("the VMM is gone after a failed Adopt")
	}
}
