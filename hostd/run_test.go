package hostd

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/sandbox/sandboxtest"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// These tests run serve's shutdown over a manager on the fake driver
// (sandboxtest): what hostd does with its sandboxes when it stops.

// twoSandboxes starts a manager over the fake driver with two running
// sandboxes and returns it and their ids. Any fake VM still running when
// the test ends is stopped then.
func twoSandboxes(t *testing.T) (*sandboxtest.Env, []string) {
	t.Helper()
	e := sandboxtest.New(t)
	t.Cleanup(func() {
		for _, vm := range e.D.VMs() {
			vm.Die(nil) // a no-op for the VMs the test ended
		}
	})
	var ids []string
	for range 2 {
		info, err := e.M.Create(context.Background(), sandbox.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	return e, ids
}

// serveAndStop runs serve with cfg over mgr and ends its ctx as soon as
// it listens, as a signal to `agentbox serve` would; it returns once
// serve has.
func serveAndStop(t *testing.T, cfg Config, mgr *sandbox.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Listen = "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	if err := serve(ctx, cfg, http.NotFoundHandler(), mgr, slog.New(slog.DiscardHandler), func(string) { cancel() }); err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// vmsOf returns the fake VMs of sandboxes ids.
func vmsOf(t *testing.T, d *vmmtest.FakeDriver, ids []string) []*vmmtest.FakeVM {
	t.Helper()
	var vms []*vmmtest.FakeVM
	for _, vm := range d.VMs() {
		for _, id := range ids {
			if vm.Config().ID == id {
				vms = append(vms, vm)
			}
		}
	}
	if len(vms) != len(ids) {
		t.Fatalf("got %d vms for sandboxes %v, want %d", len(vms), ids, len(ids))
	}
	return vms
}

func ended(vm *vmmtest.FakeVM) bool {
	select {
	case <-vm.Done():
		return true
	default:
		return false
	}
}

// TestServeDrainOnExit: with --drain-on-exit, a stopping hostd deletes
// every sandbox: no record, no directory, no VMM left.
func TestServeDrainOnExit(t *testing.T) {
	e, ids := twoSandboxes(t)
	vms := vmsOf(t, e.D, ids)
	serveAndStop(t, Config{LeaveRunning: true, DrainOnExit: true}, e.M)
	for _, id := range ids {
		if r, err := e.St.GetSandbox(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("sandbox %s after a drain: got %+v, %v; want no record", id, r, err)
		}
		if _, err := os.Stat(filepath.Join(e.Data, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sandbox %s's dir after a drain: got %v, want it removed", id, err)
		}
	}
	for _, vm := range vms {
		if !ended(vm) {
			t.Errorf("the vm (pid %d) of sandbox %s still runs after a drain", vm.PID(), vm.Config().ID)
		}
	}
}

// TestServeLeavesSandboxesRunning: by default (`agentbox serve` sets
// LeaveRunning), a stopping hostd releases its sandboxes: their VMMs run
// on, their records say running, and the next hostd's manager on the same
// data dir re-adopts them.
func TestServeLeavesSandboxesRunning(t *testing.T) {
	e, ids := twoSandboxes(t)
	vms := vmsOf(t, e.D, ids)
	serveAndStop(t, Config{LeaveRunning: true}, e.M)
	ctx := context.Background()
	for _, vm := range vms {
		if ended(vm) {
			t.Errorf("the vm (pid %d) of sandbox %s was stopped; want it left running", vm.PID(), vm.Config().ID)
		}
	}
	for _, id := range ids {
		if r, err := e.St.GetSandbox(ctx, id); err != nil || sandbox.State(r.State) != sandbox.StateRunning {
			t.Errorf("sandbox %s's record after the stop: got %+v, %v; want running", id, r, err)
		}
	}
	m2 := sandboxtest.Reopen(t, e.Opts)
	for _, id := range ids {
		if got, err := m2.Get(ctx, id); err != nil || got.State != sandbox.StateRunning {
			t.Errorf("sandbox %s in the next manager: got %s (%s), %v; want re-adopted, running", id, got.State, got.Error, err)
		}
	}
}

// TestServeStopsSandboxes: a hostd that neither leaves its sandboxes
// running nor drains (in-process tests) stops their VMMs and marks them
// failed.
func TestServeStopsSandboxes(t *testing.T) {
	e, ids := twoSandboxes(t)
	vms := vmsOf(t, e.D, ids)
	serveAndStop(t, Config{}, e.M)
	for _, id := range ids {
		if r, err := e.St.GetSandbox(context.Background(), id); err != nil || sandbox.State(r.State) != sandbox.StateFailed {
			t.Errorf("sandbox %s after the stop: got %+v, %v; want failed", id, r, err)
		}
	}
	for _, vm := range vms {
		if !ended(vm) {
			t.Errorf("the vm (pid %d) of sandbox %s still runs after the stop", vm.PID(), vm.Config().ID)
		}
	}
}
