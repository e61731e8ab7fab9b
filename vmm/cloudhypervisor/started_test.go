package cloudhypervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// guestEndpoints are the requests that make a guest run.
var guestEndpoints = map[string]bool{"vm.create": true, "vm.boot": true, "vm.restore": true, "vm.resume": true}

// startedHook returns a Config.Started that records its pids and fails the
// test if, when it runs, the fake VMM has been asked to create, boot or
// restore a guest.
func startedHook(t *testing.T, records string, pids *[]int, ret error) func(int) error {
	return func(pid int) error {
		*pids = append(*pids, pid)
		for _, r := range readRecords(t, records) {
			if r.PID == pid && guestEndpoints[r.Endpoint] {
				t.Errorf("Started(%d) ran after %s", pid, r.Endpoint)
			}
		}
		return ret
	}
}

// TestContractStartedBeforeGuest: Start and Restore call Config.Started once,
// with the VMM's pid, before the guest runs.
func TestContractStartedBeforeGuest(t *testing.T) {
	d, records := fakeDriver(t)
	root := realDir(t, t.TempDir())
	ctx := context.Background()
	var pids []int
	cfg := testVMConfig(t, root, "st1")
	cfg.Started = startedHook(t, records, &pids, nil)
	vm, err := d.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopVM(t, vm)
	if len(pids) != 1 || pids[0] != vm.PID() {
		t.Fatalf("Started got %v, want [%d]", pids, vm.PID())
	}
	echo(t, vm, "booted")
	if err := vm.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(root, "snap")
	if err := os.Mkdir(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vm.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	pids = nil
	cfg2 := testVMConfig(t, root, "st2")
	cfg2.Started = startedHook(t, records, &pids, nil)
	vm2, err := d.Restore(ctx, cfg2, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer stopVM(t, vm2)
	if len(pids) != 1 || pids[0] != vm2.PID() {
		t.Fatalf("Started on restore got %v, want [%d]", pids, vm2.PID())
	}
}

// TestContractStartedError: an error from Started fails the start with it,
// the VMM is gone, and no guest was created.
func TestContractStartedError(t *testing.T) {
	d, records := fakeDriver(t)
	root := realDir(t, t.TempDir())
	var pids []int
	boom := errors.New("no cgroup")
	cfg := testVMConfig(t, root, "st-fail")
	cfg.Started = startedHook(t, records, &pids, boom)
	if _, err := d.Start(context.Background(), cfg); !errors.Is(err, boom) {
		t.Fatalf("Start: got %v, want the Started error", err)
	}
	if len(pids) != 1 {
		t.Fatalf("Started got %v", pids)
	}
	if err := syscall.Kill(pids[0], 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists (kill 0: %v)", pids[0], err)
	}
	for _, r := range readRecords(t, records) {
		if guestEndpoints[r.Endpoint] {
			t.Errorf("the failed start still sent %s", r.Endpoint)
		}
	}
	if _, err := os.Stat(pathsFor(cfg.Dir).api); !os.IsNotExist(err) {
		t.Errorf("api socket left behind: %v", err)
	}
}
