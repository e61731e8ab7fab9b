package vmmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

// FakeVM is a VM of a FakeDriver. Besides vmm.VM it implements
// vmm.DiskSwitcher and has test hooks (Die, Disks, SystemCalls, ...).
//
// While it is paused, the guest is frozen: Dial blocks until Resume, Stop,
// or the end of its ctx; on streams already open, the guest reads and
// writes nothing, so agent calls block until Resume or the end of their
// ctx, and then complete (the host processes the agent started keep
// running, unlike a real guest's).
type FakeVM struct {
	d            *FakeDriver
	cfg          vmm.Config
	pid          int
	guest        *fakeGuest
	restoredFrom string
	bootDelay    time.Duration

	mu    sync.Mutex
	ready time.Time // when the agent answers; zero until a restored VM resumes
	disks []vmm.Disk

	endOnce  sync.Once
	exitErr  error
	done     chan struct{}
	released bool // by Release, until an Adopt (guarded by mu)
	staged   bool // by StageRestore, until Load (guarded by mu)
}

var (
	_ vmm.VM           = (*FakeVM)(nil)
	_ vmm.DiskSwitcher = (*FakeVM)(nil)
)

// ErrFakeDied is what Wait returns after Die(nil).
var ErrFakeDied = errors.New("vmmtest: fake vmm died")

// PID is the VM's fake pid: above any real pid, so no process has it.
func (v *FakeVM) PID() int { return v.pid }

// Done is closed once the VM has ended (Stop or Die) and its guest's
// processes and goroutines are gone.
func (v *FakeVM) Done() <-chan struct{} { return v.done }

// Wait blocks until the VM has ended or ctx ends. It returns nil after
// Stop, the error given to Die (ErrFakeDied for nil), or ctx.Err().
func (v *FakeVM) Wait(ctx context.Context) error {
	select {
	case <-v.done:
		return v.exitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Process identifies the fake VMM: its fake pid, and a start time of 1.
func (v *FakeVM) Process() vmm.Process { return vmm.Process{PID: v.pid, StartTime: 1} }

// Release lets go of the VM as a hostd that stops would: its guest (agent,
// sessions, processes) keeps running, and every call fails with
// vmm.ErrNotRunning until the driver's Adopt takes it back. Done stays open.
func (v *FakeVM) Release() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.released = true
	return nil
}

func (v *FakeVM) running() error {
	v.mu.Lock()
	rel := v.released
	v.mu.Unlock()
	if rel {
		return vmm.ErrNotRunning
	}
	select {
	case <-v.done:
		return vmm.ErrNotRunning
	default:
	}
	if v.guest.closing() {
		return vmm.ErrNotRunning
	}
	return nil
}

// Dial opens a stream to port. Like the real backends it waits, until ctx
// ends, for a guest that does not answer yet: one still booting
// (BootDelay), a restored VM not yet resumed, a paused one. A port nothing
// serves is channel.ErrRefused; an ended VM is vmm.ErrNotRunning.
func (v *FakeVM) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	if err := v.running(); err != nil {
		return nil, err
	}
	for {
		if err := v.guest.gate.wait(ctx); err != nil {
			return nil, v.dialErr(ctx, err)
		}
		v.mu.Lock()
		ready := v.ready
		v.mu.Unlock()
		if !ready.IsZero() {
			if err := sleepCtx(ctx, time.Until(ready)); err != nil {
				return nil, err
			}
			break
		}
	}
	conn, err := v.guest.dial(ctx, port, v.done)
	if err != nil {
		return nil, v.dialErr(ctx, err)
	}
	return conn, nil
}

func (v *FakeVM) dialErr(ctx context.Context, err error) error {
	if errors.Is(err, errGuestClosed) {
		return vmm.ErrNotRunning
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("vmmtest: dial: %w", err)
}

// Pause freezes the guest (see FakeVM).
func (v *FakeVM) Pause(ctx context.Context) error {
	if err := v.running(); err != nil {
		return err
	}
	v.guest.gate.pause()
	return nil
}

// Resume unfreezes the guest. A restored VM's agent then answers after
// BootDelay.
func (v *FakeVM) Resume(ctx context.Context) error {
	if err := v.running(); err != nil {
		return err
	}
	v.mu.Lock()
	if v.ready.IsZero() {
		v.ready = time.Now().Add(v.bootDelay)
	}
	v.mu.Unlock()
	v.guest.gate.resume()
	return nil
}

// Snapshot writes the fake's state file into dir, which must exist; the
// VM must be paused. HoldNextSnapshot makes it wait for staged restores
// first, and FailNextSnapshot makes it fail.
func (v *FakeVM) Snapshot(ctx context.Context, dir string) error {
	if err := v.running(); err != nil {
		return err
	}
	if err := v.d.waitStaged(ctx); err != nil {
		return err
	}
	if err := take(&v.d.mu, &v.d.failSnap); err != nil {
		return fmt.Errorf("vmmtest: fake snapshot: %w", err)
	}
	if !v.guest.gate.isPaused() {
		return errors.New("vmmtest: fake snapshot of a running vm (pause it first)")
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("vmmtest: snapshot dir %s: %v", dir, err)
	}
	b, err := json.Marshal(v.state())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fakeStateFile), b, 0o644)
}

// state is what a snapshot of the VM keeps.
func (v *FakeVM) state() fakeState {
	return fakeState{Driver: v.d.opts.Name, SourceID: v.cfg.ID, Hostname: v.guest.system.name()}
}

// Stop ends the VM: the agent's streams close and the processes it started
// are killed. It returns once the VM is gone, or ctx.Err() when ctx ends
// first (the VM then still ends, in the background). Stop of an ended VM
// returns nil.
func (v *FakeVM) Stop(ctx context.Context) error {
	v.end(nil)
	select {
	case <-v.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Die makes the VMM "crash": the VM ends as with Stop, and Wait returns
// err (ErrFakeDied when nil). Die returns once Done is closed.
func (v *FakeVM) Die(err error) {
	if err == nil {
		err = ErrFakeDied
	}
	v.end(err)
	<-v.done
}

// end starts the VM's end once; Done closes when it is over.
func (v *FakeVM) end(exitErr error) {
	v.endOnce.Do(func() {
		v.exitErr = exitErr
		v.guest.beginClose()
		go func() {
			_ = v.guest.close(context.Background())
			close(v.done)
		}()
	})
}

// ReplaceAgent makes a serve the guest end of v's later streams on port
// (nil: what guestinit serves there again), as root in a guest that kills
// guestinit and starts its own would. Replacing the agent's port
// (channel.AgentPort) also cuts the open streams of the agent it replaces,
// so hostd's next call dials a. Only a test's hostile guest needs this.
func (v *FakeVM) ReplaceAgent(port uint32, a Agent) { v.guest.replace(port, a) }

// SwitchDisk moves disk index onto overlay, which must exist (see
// vmm.DiskSwitcher); Disks reports the switch.
func (v *FakeVM) SwitchDisk(ctx context.Context, index int, overlay string) error {
	if err := v.running(); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if index < 0 || index >= len(v.disks) {
		return fmt.Errorf("vmmtest: switch disk %d of %d", index, len(v.disks))
	}
	if _, err := os.Stat(overlay); err != nil {
		return fmt.Errorf("vmmtest: switch disk: %w", err)
	}
	v.disks[index].Path = overlay
	return nil
}

// Config is the config the VM was started or restored with.
func (v *FakeVM) Config() vmm.Config { return v.cfg }

// Disks are the VM's disks, with the paths SwitchDisk moved them to.
func (v *FakeVM) Disks() []vmm.Disk {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]vmm.Disk(nil), v.disks...)
}

// RestoredFrom is the snapshot directory the VM was restored from ("" for
// a VM that Start booted).
func (v *FakeVM) RestoredFrom() string { return v.restoredFrom }

// Paused reports whether the VM is paused (a restored VM is, until Resume).
func (v *FakeVM) Paused() bool { return v.guest.gate.isPaused() }

// SystemCalls is how many times the agent's System service got method
// name ("Health", "SetTime", "Reseed", "SetIdentity", "Freeze", "Thaw").
func (v *FakeVM) SystemCalls(name string) int { return v.guest.system.count(name) }

// Hostname is the guest's hostname: from the kernel command line's
// agentbox.hostname= (else the VM's id), the snapshot's for a restored VM,
// or the last SetIdentity's.
func (v *FakeVM) Hostname() string { return v.guest.system.name() }
