package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/waitfor"
	"github.com/agentbox/agentbox/vmm"
)

// restoreCounter is a driver whose restores are counted: how many ran at
// once, at most. Each restore waits until limit of them are in flight, or
// all total have begun, so that the copies pile up as far as the fork lets
// them.
type restoreCounter struct {
	vmm.Driver
	limit, total int
	mu           sync.Mutex
	piled        sync.Cond // on mu: cur or begun grew
	cur, most    int
	begun        int
}

func newRestoreCounter(d vmm.Driver, limit, total int) *restoreCounter {
	c := &restoreCounter{Driver: d, limit: limit, total: total}
	c.piled.L = &c.mu
	return c
}

func (d *restoreCounter) Restore(ctx context.Context, cfg vmm.Config, dir string) (vmm.VM, error) {
	d.mu.Lock()
	d.cur++
	d.begun++
	d.most = max(d.most, d.cur)
	d.piled.Broadcast()
	late := false
	guard := time.AfterFunc(waitfor.Timeout, func() { d.mu.Lock(); late = true; d.piled.Broadcast(); d.mu.Unlock() })
	for d.cur < d.limit && d.begun < d.total && !late {
		d.piled.Wait()
	}
	guard.Stop()
	failed, cur, begun := late, d.cur, d.begun
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.cur--
		d.mu.Unlock()
	}()
	if failed {
		return nil, fmt.Errorf("restoreCounter: %d restores at once, %d of %d begun, after %v: the others did not pile up",
			cur, begun, d.total, waitfor.Timeout)
	}
	return d.Driver.Restore(ctx, cfg, dir)
}

// TestForkStartsCopiesForkParallelAtATime forks 5 copies with
// ForkParallel 2: every copy runs, and 2 restored at once, no more.
func TestForkStartsCopiesForkParallelAtATime(t *testing.T) {
	var d *restoreCounter
	e := newEnv(t, func(o *Options) {
		o.ForkParallel = 2
		d = newRestoreCounter(o.Driver, 2, 5)
		o.Driver = d
	})
	src := e.create(CreateOptions{})
	forks, err := e.m.Fork(context.Background(), src.ID, ForkOptions{Count: 5})
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
	if d.most != 2 {
		t.Errorf("restores at once: got at most %d, want 2", d.most)
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
	forks, err := e.m.Fork(context.Background(), src.ID, ForkOptions{Count: 3})
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
	if _, err := e.m.Fork(context.Background(), src.ID, ForkOptions{Count: 2}); err == nil || !strings.Contains(err.Error(), "disk full") {
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
