package vmmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

// fakePlanFile is what a FakeVM's PlanSnapshot writes, and StageRestore
// reads: the fakeState that its Snapshot will write.
const fakePlanFile = "fake-plan.json"

var (
	_ vmm.Stager          = (*FakeDriver)(nil)
	_ vmm.StagedVM        = (*FakeVM)(nil)
	_ vmm.SnapshotPlanner = (*FakeVM)(nil)
)

// PlanSnapshot writes the plan of the paused VM's snapshot into dir.
func (v *FakeVM) PlanSnapshot(ctx context.Context, dir string) error {
	if err := v.running(); err != nil {
		return err
	}
	if !v.guest.gate.isPaused() {
		return errors.New("vmmtest: fake snapshot plan of a running vm (pause it first)")
	}
	b, err := json.Marshal(v.state())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fakePlanFile), b, 0o644)
}

// StageRestore "launches" a VM for the snapshot planned into dir, like
// Restore otherwise (it counts as one); Load completes it once the
// snapshot was written.
func (d *FakeDriver) StageRestore(ctx context.Context, cfg vmm.Config, dir string) (vmm.StagedVM, error) {
	_, err := os.Stat(filepath.Join(dir, fakeStateFile))
	early := errors.Is(err, os.ErrNotExist)
	vm, err := d.restore(ctx, cfg, dir, fakePlanFile)
	if err != nil {
		return nil, err
	}
	if early {
		d.set(func() { d.early++ })
	}
	vm.mu.Lock()
	vm.staged = true
	vm.mu.Unlock()
	select {
	case d.staged <- struct{}{}:
	default:
	}
	return vm, nil
}

// HoldNextSnapshot makes the next Snapshot wait, before it writes anything
// or fails, until n restores were staged (StageRestore), at most 20 s or
// until its ctx ends: a test's copies then surely start during a capture.
func (d *FakeDriver) HoldNextSnapshot(n int) {
	d.set(func() {
		d.holdStages = n
		for len(d.staged) > 0 {
			<-d.staged
		}
	})
}

// waitStaged is Snapshot's wait for HoldNextSnapshot.
func (d *FakeDriver) waitStaged(ctx context.Context) error {
	var n int
	d.set(func() { n, d.holdStages = d.holdStages, 0 })
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for i := range n {
		select {
		case <-d.staged:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("vmmtest: fake snapshot: %d restores staged, want %d", i, n)
		}
	}
	return nil
}

// Load completes a staged VM's restore: its snapshot must have been written
// by now. A failed Load stops the VM.
func (v *FakeVM) Load(ctx context.Context) error {
	v.mu.Lock()
	staged := v.staged
	v.staged = false
	v.mu.Unlock()
	if !staged {
		return errors.New("vmmtest: load: the fake vm has no restore to load")
	}
	if _, err := v.d.readState(v.restoredFrom, fakeStateFile); err != nil {
		return errors.Join(fmt.Errorf("vmmtest: fake load: %w", err), v.Stop(context.WithoutCancel(ctx)))
	}
	return v.running()
}

// readState reads the fakeState of this driver in file name of dir; any
// other file is vmm.ErrUnsupported.
func (d *FakeDriver) readState(dir, name string) (fakeState, error) {
	var st fakeState
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return st, fmt.Errorf("vmmtest: %s is not a fake vm snapshot (%v): %w", dir, err, vmm.ErrUnsupported)
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Driver != d.opts.Name {
		return st, fmt.Errorf("vmmtest: %s is not a %q snapshot: %w", dir, d.opts.Name, vmm.ErrUnsupported)
	}
	return st, nil
}
