package sandbox

import (
	"context"
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
