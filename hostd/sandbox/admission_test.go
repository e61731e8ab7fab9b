package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/hostd/store"
)

// A fork is admitted as a create is: a key that may not create a 2-vCPU
// sandbox may not fork one, and its copies get no more than its maximums
// (issue 38, finding 2: forks took the parent's limits unchecked).
func TestForkAdmittedAsCreate(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		// Limits the fake guest applies on the host (max_pids, disk_mib)
		// are left out: its guest-limits script would run on this host.
		o.KeyMax = map[string]Maximums{"small": {VCPUs: 1, MemoryMiB: 512, Limits: Limits{ExecTimeoutS: 60, IdleTimeoutS: 600}}}
	})
	ctx := context.Background()
	big := e.create(CreateOptions{VCPUs: 2, MemoryMiB: 1024})
	if _, err := e.m.Create(ctx, CreateOptions{VCPUs: 2, MemoryMiB: 1024, Caller: "small"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("create over the key's maximum: got %v, want ErrInvalid", err)
	}
	_, err := e.m.Fork(ctx, big.ID, ForkOptions{Count: 1, Caller: "small"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "vcpus") {
		t.Fatalf("fork over the key's maximum: got %v, want ErrInvalid naming vcpus", err)
	}
	small := e.create(CreateOptions{VCPUs: 1, MemoryMiB: 512})
	forks, err := e.m.Fork(ctx, small.ID, ForkOptions{Count: 2, Caller: "small"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		if f.Limits.ExecTimeoutS != 60 || f.Limits.IdleTimeoutS != 600 {
			t.Errorf("fork %s: exec_timeout_s %d, idle_timeout_s %d; want the key's 60 and 600", f.ID, f.Limits.ExecTimeoutS, f.Limits.IdleTimeoutS)
		}
	}
}

// A delete of the parent while a fork's copies start leaves their
// snapshot in place: the copies run on it, pause and resume, and a
// snapshot of one names an existing parent (issue 38, finding 1).
func TestDeleteParentDuringFork(t *testing.T) {
	var held *heldRestores
	e := newEnv(t, func(o *Options) {
		held = &heldRestores{Driver: o.Driver, begun: make(chan struct{}, 1), release: make(chan struct{})}
		o.Driver = held // no StageRestore: the copies restore once the capture is written
	})
	ctx := context.Background()
	parent := e.create(CreateOptions{})
	type result struct {
		forks []Info
		err   error
	}
	done := make(chan result, 1)
	go func() {
		forks, err := e.m.Fork(ctx, parent.ID, ForkOptions{Count: 2})
		done <- result{forks, err}
	}()
	<-held.begun // the fork's snapshot exists; its copies are being restored
	if err := e.m.Delete(ctx, parent.ID); err != nil {
		t.Fatalf("delete the parent during the fork: %v", err)
	}
	close(held.release)
	r := <-done
	if r.err != nil {
		t.Fatalf("fork: %v", r.err)
	}
	for _, f := range r.forks {
		sn, err := e.st.GetSnapshot(ctx, f.SnapshotID)
		if err != nil {
			t.Fatalf("fork %s: its snapshot %s: %v", f.ID, f.SnapshotID, err)
		}
		if _, err := os.Stat(sn.Dir); err != nil {
			t.Fatalf("fork %s: its snapshot's files: %v", f.ID, err)
		}
		if _, err := e.m.Pause(ctx, f.ID); err != nil {
			t.Fatalf("pause fork %s: %v", f.ID, err)
		}
		if _, err := e.m.Resume(ctx, f.ID); err != nil {
			t.Fatalf("resume fork %s: %v", f.ID, err)
		}
	}
	child, err := e.m.Snapshot(ctx, r.forks[0].ID, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.GetSnapshot(ctx, child.ParentID); err != nil {
		t.Errorf("a fork's snapshot names parent %s: %v", child.ParentID, err)
	}
	checkReferences(t, e)
}

// A snapshot being restored is not deleted under the restore: the delete
// is refused as in use, and the restored sandbox runs on it.
func TestDeleteSnapshotDuringRestore(t *testing.T) {
	var held *heldRestores
	e := newEnv(t, func(o *Options) {
		held = &heldRestores{Driver: o.Driver, begun: make(chan struct{}, 1), release: make(chan struct{})}
		o.Driver = held
	})
	ctx := context.Background()
	src := e.create(CreateOptions{})
	sn, err := e.m.Snapshot(ctx, src.ID, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Create(ctx, CreateOptions{Snapshot: sn.ID})
		done <- err
	}()
	<-held.begun
	if err := e.svc.DeleteSnapshot(ctx, sn.ID); !errors.Is(err, ErrInUse) {
		t.Errorf("delete a snapshot being restored: got %v, want ErrInUse", err)
	}
	close(held.release)
	if err := <-done; err != nil {
		t.Fatalf("restore: %v", err)
	}
	checkReferences(t, e)
}

// Deletes race forks, snapshots, restores and template creations in a
// loop; whatever wins, no record names a snapshot that is gone.
func TestDeleteRacesInALoop(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := range 6 {
		parent := e.create(CreateOptions{})
		sn, err := e.m.Snapshot(ctx, parent.ID, SnapshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = e.m.Fork(ctx, parent.ID, ForkOptions{Count: 2}) })
		wg.Go(func() { _, _ = e.m.Snapshot(ctx, parent.ID, SnapshotOptions{}) })
		wg.Go(func() { _ = e.m.Delete(ctx, parent.ID) })
		wg.Go(func() { _, _ = e.m.Create(ctx, CreateOptions{Snapshot: sn.ID}) })
		wg.Go(func() { _, _ = e.svc.CreateTemplate(ctx, fmt.Sprintf("t%d", i), sn.ID, 0) })
		wg.Go(func() { _ = e.svc.DeleteSnapshot(ctx, sn.ID) })
		wg.Wait()
		checkReferences(t, e)
	}
}

// checkReferences fails the test for any sandbox, template or snapshot
// whose record names a snapshot that is gone, or whose files are.
func checkReferences(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	exists := func(what, id string) {
		t.Helper()
		if id == "" {
			return
		}
		sn, err := e.st.GetSnapshot(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s names snapshot %s, which is gone", what, id)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(sn.Dir); err != nil {
			t.Errorf("%s names snapshot %s, whose files are gone: %v", what, id, err)
		}
	}
	sbs, err := e.st.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if State(sb.State) != StateRunning && State(sb.State) != StatePaused {
			continue
		}
		v, err := e.st.GetSandboxVM(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		exists("sandbox "+sb.ID, v.SnapshotID)
	}
	ts, err := e.st.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range ts {
		exists("template "+tp.Name, tp.SnapshotID)
	}
	sns, err := e.st.ListSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range sns {
		exists("snapshot "+sn.ID, sn.ParentID)
	}
}

// failingVMRecord is a store that cannot record a sandbox's VM: a create
// fails after its VM runs, at its adoption.
type failingVMRecord struct{ *store.Store }

func (failingVMRecord) PutSandboxVM(context.Context, store.SandboxVM) error {
	return errors.New("disk full")
}

// A create that fails once its VM runs (here: recording the VM; in the
// probe: the guest refusing disk_mib) leaves a failed record with the
// reason, no running VM and no files (issue 38, finding 6: the record
// said running, with the pid of a VMM that had exited).
func TestFailedAdoptLeavesNoRunningRecord(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Store = failingVMRecord{o.Store.(*store.Store)} })
	ctx := context.Background()
	if _, err := e.m.Create(ctx, CreateOptions{Boot: BootCold}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("create: got %v, want the store's error", err)
	}
	list, err := e.m.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v, %v; want the one failed sandbox", list, err)
	}
	sb := list[0]
	if sb.State != StateFailed || !strings.Contains(sb.Error, "disk full") || sb.VMPID != 0 {
		t.Errorf("got %s %q pid %d, want failed with the reason and no pid", sb.State, sb.Error, sb.VMPID)
	}
	for _, vm := range e.d.VMs() {
		select {
		case <-vm.Done():
		default:
			t.Errorf("vm %d still runs after the failed create", vm.PID())
		}
	}
	if _, err := os.Stat(e.data + "/sandboxes/" + sb.ID); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed create's directory: %v, want it gone", err)
	}
}
