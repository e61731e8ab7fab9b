package vmmtest

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/vmm"
)

// snapshotVM pauses vm, snapshots it into a new directory with a copy of its
// disk (disk.qcow2, the frozen layer the restores overlay), and resumes it.
func snapshotVM(t *testing.T, vm vmm.VM, cfg vmm.Config) string {
	t.Helper()
	ctx := context.Background()
	dir := ShortTempDir(t)
	if err := vm.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := vm.Snapshot(ctx, dir); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := copyFile(cfg.Disks[0].Path, filepath.Join(dir, "disk.qcow2")); err != nil {
		t.Fatal(err)
	}
	if err := vm.Resume(ctx); err != nil {
		t.Fatalf("resume after snapshot: %v", err)
	}
	return dir
}

// checkSnapshot snapshots a VM, restores it (boot checks that a restore
// starts paused and calls Started), and checks that the source goes on,
// that a restore of an empty dir is ErrUnsupported, and that a restored VM
// stops gracefully. With a real guest it also checks the guest's state.
func checkSnapshot(t *testing.T, tgt Target, d vmm.Driver, vm vmm.VM, c *agentclient.Client, cfg vmm.Config) {
	ctx := context.Background()
	if !tgt.RealGuest {
		snap := snapshotVM(t, vm, cfg)
		if out := runCmd(t, c, agentclient.Command{Argv: []string{"echo", "source"}}); out.stdout != "source\n" {
			t.Errorf("source after snapshot: got %q", out.stdout)
		}
		r, rc, _ := boot(t, tgt, d, "restored", snap)
		if out := runCmd(t, rc, agentclient.Command{Argv: []string{"echo", "restored"}}); out.stdout != "restored\n" {
			t.Errorf("restore: got %q", out.stdout)
		}
		checkStop(t, r)
	} else {
		checkGuestSnapshot(t, tgt, d, vm, c, cfg)
	}
	if _, err := d.Restore(ctx, tgt.Config(t, "bad", ""), ShortTempDir(t)); !errors.Is(err, vmm.ErrUnsupported) {
		t.Errorf("restore from an empty dir: got %v, want ErrUnsupported", err)
	}
}

// checkGuestSnapshot snapshots a VM with a file and a running process,
// restores it twice (the restores share the snapshot), and checks state,
// isolation, and that a restored VM can itself be snapshotted and restored.
func checkGuestSnapshot(t *testing.T, tgt Target, d vmm.Driver, vm vmm.VM, c *agentclient.Client, cfg vmm.Config) {
	ctx := context.Background()
	runCmd(t, c, agentclient.Command{Shell: "echo before > /root/state; sync"})
	if _, err := c.Start(ctx, agentclient.Command{Shell: "i=0; while true; do i=$((i+1)); echo $i > /root/counter; sleep 0.2; done"}); err != nil {
		t.Fatal(err)
	}
	snap := snapshotVM(t, vm, cfg)
	// The source goes on after the snapshot.
	runCmd(t, c, agentclient.Command{Shell: "echo after > /root/state"})
	if out := runCmd(t, c, agentclient.Command{Shell: "cat /root/state"}); out.stdout != "after\n" {
		t.Errorf("source after snapshot: got %q", out.stdout)
	}
	ra, a, _ := boot(t, tgt, d, "restored-a", snap)
	_, b, _ := boot(t, tgt, d, "restored-b", snap)
	for name, rc := range map[string]*agentclient.Client{"a": a, "b": b} {
		if out := runCmd(t, rc, agentclient.Command{Shell: "cat /root/state"}); out.stdout != "before\n" {
			t.Errorf("restore %s: got %q, want the snapshot's state", name, out.stdout)
		}
		// The background process survived the snapshot and keeps counting.
		if out := runCmd(t, rc, agentclient.Command{Shell: "a=$(cat /root/counter); while [ $(cat /root/counter) -le $a ]; do sleep 0.1; done; echo counting"}); out.stdout != "counting\n" {
			t.Errorf("restore %s: background process: got %q", name, out.stdout)
		}
	}
	runCmd(t, a, agentclient.Command{Shell: "echo only-a > /root/state"})
	if out := runCmd(t, b, agentclient.Command{Shell: "cat /root/state"}); out.stdout != "before\n" {
		t.Errorf("a write in restore a shows in restore b: %q", out.stdout)
	}
	checkStop(t, ra)
	checkSnapshotOfRestore(t, tgt, d)
}

// checkSnapshotOfRestore snapshots a restored VM and restores that.
func checkSnapshotOfRestore(t *testing.T, tgt Target, d vmm.Driver) {
	vm, c, cfg := boot(t, tgt, d, "second-gen", "")
	runCmd(t, c, agentclient.Command{Shell: "echo gen1 > /root/gen; sync"})
	snap1 := snapshotVM(t, vm, cfg)
	vm2, c2, cfg2 := boot(t, tgt, d, "gen2", snap1)
	runCmd(t, c2, agentclient.Command{Shell: "echo gen2 >> /root/gen; sync"})
	snap2 := snapshotVM(t, vm2, cfg2)
	_, c3, _ := boot(t, tgt, d, "gen3", snap2)
	if out := runCmd(t, c3, agentclient.Command{Shell: "cat /root/gen"}); strings.TrimSpace(out.stdout) != "gen1\ngen2" {
		t.Errorf("restore of a restore's snapshot: got %q", out.stdout)
	}
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Close())
}

// checkStagedRestore, for a driver that stages restores (vmm.Stager): VMs
// staged on a snapshot that is only planned start; once the snapshot is
// written, Load restores one, paused, with the state the source had at the
// snapshot; a second Load fails; a staged VM never loaded stops. A VM so
// restored is itself the source of a staged restore.
func checkStagedRestore(t *testing.T, tgt Target, d vmm.Driver, vm vmm.VM, c *agentclient.Client, cfg vmm.Config) {
	st, stages := d.(vmm.Stager)
	if _, plans := vm.(vmm.SnapshotPlanner); !stages || !plans {
		t.Skipf("%s does not stage restores (optional)", d.Name())
	}
	ctx := context.Background()
	file := "/root/staged" // the fake's guest shares the host's files
	if !tgt.RealGuest {
		file = filepath.Join(t.TempDir(), "staged")
	}
	runCmd(t, c, agentclient.Command{Shell: "echo staged > " + file + "; sync"})
	var abandoned vmm.StagedVM
	r, rc, rcfg := stagedFrom(t, tgt, st, vm, cfg, "staged", func(dir string) error {
		var err error
		abandoned, err = st.StageRestore(ctx, tgt.Config(t, "abandoned", filepath.Join(dir, "disk.qcow2")), dir)
		return err
	})
	if out := runCmd(t, rc, agentclient.Command{Shell: "cat " + file}); out.stdout != "staged\n" {
		t.Errorf("staged restore: got %q, want the snapshot's file", out.stdout)
	}
	if err := r.(vmm.StagedVM).Load(ctx); err == nil {
		t.Error("a second Load succeeded")
	}
	pid := abandoned.PID()
	if err := abandoned.Stop(ctx); err != nil {
		t.Errorf("stop a staged vm: %v", err)
	}
	checkGone(t, abandoned, pid)
	runCmd(t, rc, agentclient.Command{Shell: "echo again >> " + file + "; sync"})
	r2, rc2, _ := stagedFrom(t, tgt, st, r, rcfg, "staged-2", nil)
	if out := runCmd(t, rc2, agentclient.Command{Shell: "cat " + file}); out.stdout != "staged\nagain\n" {
		t.Errorf("staged restore of a restored vm: got %q", out.stdout)
	}
	checkStop(t, r2)
	checkStop(t, r)
	runCmd(t, c, agentclient.Command{Shell: "rm " + file})
}

// stagedFrom pauses vm, plans its snapshot into a new directory with a copy
// of its disk, stages a restore of it named id (and calls also, if set,
// with the directory), writes the snapshot, resumes vm, loads the staged
// VM and dials its agent.
func stagedFrom(t *testing.T, tgt Target, st vmm.Stager, vm vmm.VM, cfg vmm.Config, id string, also func(dir string) error) (vmm.VM, *agentclient.Client, vmm.Config) {
	t.Helper()
	ctx := context.Background()
	dir := ShortTempDir(t)
	if err := vm.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := vm.Resume(ctx); err != nil {
				t.Errorf("resume after snapshot: %v", err)
			}
		}
	}
	defer resume()
	if err := vm.(vmm.SnapshotPlanner).PlanSnapshot(ctx, dir); err != nil {
		t.Fatalf("plan: %v", err)
	}
	if err := copyFile(cfg.Disks[0].Path, filepath.Join(dir, "disk.qcow2")); err != nil {
		t.Fatal(err)
	}
	return bootWith(t, tgt, id, dir, func(ctx context.Context, cfg vmm.Config) (vmm.VM, error) {
		staged, err := st.StageRestore(ctx, cfg, dir)
		if err != nil {
			return nil, err
		}
		if also != nil {
			if err := also(dir); err != nil {
				return nil, errors.Join(err, staged.Stop(ctx))
			}
		}
		if err := vm.Snapshot(ctx, dir); err != nil {
			return nil, errors.Join(err, staged.Stop(ctx))
		}
		resume()
		return staged, staged.Load(ctx)
	})
}
