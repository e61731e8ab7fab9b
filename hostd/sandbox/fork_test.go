package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

// restoreCounter is a driver whose restores take a while and are counted:
// how many ran at once, at most.
type restoreCounter struct {
	vmm.Driver
	mu        sync.Mutex
	cur, most int
}

func (d *restoreCounter) Restore(ctx context.Context, cfg vmm.Config, dir string) (vmm.VM, error) {
	d.mu.Lock()
	d.cur++
	d.most = max(d.most, d.cur)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.cur--
		d.mu.Unlock()
	}()
	time.Sleep(30 * time.Millisecond) // long enough for the others to pile up
	return d.Driver.Restore(ctx, cfg, dir)
}

// TestForkStartsCopiesForkParallelAtATime forks 5 copies with
// ForkParallel 2: every copy runs, and no more than 2 restored at once.
func TestForkStartsCopiesForkParallelAtATime(t *testing.T) {
	var d *restoreCounter
	e := newEnv(t, func(o *Options) {
		o.ForkParallel = 2
		d = &restoreCounter{Driver: o.Driver}
		o.Driver = d
	})
	src := e.create(CreateOptions{})
	forks, err := e.m.Fork(context.Background(), src.ID, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 5 {
		t.Fatalf("got %d forks, want 5", len(forks))
	}
	for _, f := range forks {
		if out, code := e.run(f.ID, "echo fork"); out != "fork\n" || code != 0 {
			t.Errorf("fork %s: got %q %d", f.ID, out, code)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.most < 1 || d.most > 2 {
		t.Errorf("restores at once: got at most %d, want 1..2", d.most)
	}
}

// TestForkStagesCopiesDuringTheCapture forks 3 copies with ForkParallel 2
// on a driver that stages restores: the first 2 VMMs start while the
// parent's snapshot is still being written, the third from the finished
// snapshot, and all of them run.
func TestForkStagesCopiesDuringTheCapture(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ForkParallel = 2 })
	src := e.create(CreateOptions{})
	e.d.HoldNextSnapshot(2)
	forks, err := e.m.Fork(context.Background(), src.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		if out, code := e.run(f.ID, "echo fork"); out != "fork\n" || code != 0 {
			t.Errorf("fork %s: got %q %d", f.ID, out, code)
		}
	}
	if n := e.d.StagedEarly(); n != 2 {
		t.Errorf("copies staged during the capture: %d, want 2", n)
	}
	if n := e.d.Restores(); n != 3 {
		t.Errorf("restores: %d, want 3", n)
	}
}

// TestForkStagedCopiesEndWithAFailedCapture fails the parent's snapshot
// after the copies were staged: the fork fails with the snapshot's error,
// the staged VMMs end, no copy is left in the list, and the parent runs on.
func TestForkStagedCopiesEndWithAFailedCapture(t *testing.T) {
	e := newEnv(t)
	src := e.create(CreateOptions{})
	e.d.HoldNextSnapshot(2)
	e.d.FailNextSnapshot(errors.New("disk full"))
	if _, err := e.m.Fork(context.Background(), src.ID, 2); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("fork: %v, want the snapshot's error", err)
	}
	if n := e.d.StagedEarly(); n != 2 {
		t.Errorf("copies staged during the capture: %d, want 2", n)
	}
	for _, vm := range e.d.VMs() {
		if vm.RestoredFrom() == "" {
			continue
		}
		select {
		case <-vm.Done():
		default:
			t.Errorf("staged VM %s still runs", vm.Config().ID)
		}
	}
	list, err := e.m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != src.ID {
		t.Errorf("sandboxes after the failed fork: %+v, want only the parent", list)
	}
	if out, code := e.run(src.ID, "echo parent"); out != "parent\n" || code != 0 {
		t.Errorf("parent after the failed fork: got %q %d", out, code)
	}
}
