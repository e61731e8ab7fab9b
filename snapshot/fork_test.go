package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/snapshot"
)

// recv returns the next value of ch. Its deadline only turns a hang (a
// copy that never started) into a failure; nothing is timed.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s", what)
		var zero T
		return zero
	}
}

// forkResult is what a Fork run in the background returned.
type forkResult struct {
	ids []string
	sn  snapshot.Record
	err error
}

func goFork(p snapshot.ForkPlan) <-chan forkResult {
	ch := make(chan forkResult, 1)
	go func() {
		ids, sn, err := snapshot.Fork(context.Background(), p)
		ch <- forkResult{ids, sn, err}
	}()
	return ch
}

// removals records a plan's Remove calls.
type removals struct {
	mu  sync.Mutex
	ids []string
}

func (r *removals) remove(_ context.Context, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
}

func (r *removals) sorted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.ids))
}

// TestForkParallel: the copies start Parallel at a time (at least one),
// and all of them run. Each Start holds its slot until the test releases
// it, so the test sees Parallel copies start before any ends.
func TestForkParallel(t *testing.T) {
	for _, tc := range []struct{ count, parallel, want int }{
		{5, 2, 2}, {3, 1, 1}, {2, 8, 2}, {3, 0, 1},
	} {
		t.Run(fmt.Sprintf("%d by %d", tc.count, tc.parallel), func(t *testing.T) {
			var running, most atomic.Int32
			entered, release := make(chan int), make(chan struct{})
			sn := snapshot.Record{ID: "sn-fork"}
			res := goFork(snapshot.ForkPlan{Count: tc.count, Parallel: tc.parallel,
				Capture: func(context.Context, func(snapshot.Record)) (snapshot.Record, error) { return sn, nil },
				Start: func(_ context.Context, i int, from snapshot.From) (string, error) {
					n := running.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					entered <- i
					<-release
					running.Add(-1)
					return fmt.Sprintf("sb-%d", i), nil
				},
				Remove: func(context.Context, string) { t.Error("Remove of a fork that succeeded") },
			})
			started := map[int]bool{}
			for range tc.want {
				started[recv(t, entered, "copy start")] = true
			}
			for len(started) < tc.count {
				release <- struct{}{}
				started[recv(t, entered, "copy start")] = true
			}
			for range tc.want {
				release <- struct{}{}
			}
			r := recv(t, res, "fork's end")
			if r.err != nil {
				t.Fatal(r.err)
			}
			if got := most.Load(); int(got) != tc.want {
				t.Errorf("copies at once: got %d, want %d", got, tc.want)
			}
			want := []string{}
			for i := range tc.count {
				want = append(want, fmt.Sprintf("sb-%d", i))
			}
			if !slices.Equal(r.ids, want) || r.sn.ID != sn.ID {
				t.Errorf("got %v on %s, want %v on %s", r.ids, r.sn.ID, want, sn.ID)
			}
		})
	}
}

// stagedFork is a staged fork of count copies, parallel at a time, whose
// capture plans planned and, once the staged copies all started, ends with
// captureErr (else it made done). Staged copies wait on their gate.
type stagedFork struct {
	mu    sync.Mutex
	froms map[int]snapshot.From
	waits map[int]error // the staged copies' Gate.Wait
	rm    removals
	// beforeEnd: the number of copies started when the capture returned.
	beforeEnd int
}

func runStaged(t *testing.T, count, parallel int, captureErr error, startErr func(i int) (string, error)) (*stagedFork, forkResult) {
	t.Helper()
	f := &stagedFork{froms: map[int]snapshot.From{}, waits: map[int]error{}}
	planned, done := snapshot.Record{ID: "sn-planned"}, snapshot.Record{ID: "sn-done", Dir: "/done"}
	entered := make(chan int, count)
	p := snapshot.ForkPlan{Count: count, Parallel: parallel, Staged: true, Remove: f.rm.remove,
		Capture: func(ctx context.Context, plan func(snapshot.Record)) (snapshot.Record, error) {
			plan(planned)
			for range min(count, parallel) {
				select { // not recv: this is not the test's goroutine
				case <-entered:
				case <-time.After(20 * time.Second):
					return snapshot.Record{}, errors.New("the staged copies did not start")
				}
			}
			f.mu.Lock()
			f.beforeEnd = len(f.froms)
			f.mu.Unlock()
			return done, captureErr
		},
		Start: func(ctx context.Context, i int, from snapshot.From) (string, error) {
			f.mu.Lock()
			f.froms[i] = from
			f.mu.Unlock()
			entered <- i
			if from.Gate != nil {
				err := from.Gate.Wait(ctx)
				f.mu.Lock()
				f.waits[i] = err
				f.mu.Unlock()
				if err != nil {
					return startErr(i)
				}
			}
			return fmt.Sprintf("sb-%d", i), nil
		},
	}
	return f, recv(t, goFork(p), "fork's end")
}

// TestForkStaged: the first Parallel copies start inside the capture, on
// a gate of the snapshot it planned, and load once it succeeded; the rest
// start from the snapshot it made.
func TestForkStaged(t *testing.T) {
	f, r := runStaged(t, 5, 2, nil, nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if f.beforeEnd != 2 {
		t.Errorf("copies started during the capture: got %d, want 2", f.beforeEnd)
	}
	gate := f.froms[0].Gate
	for i := range 5 {
		from := f.froms[i]
		if i < 2 {
			if from.Gate == nil || from.Gate != gate || from.Gate.Planned().ID != "sn-planned" {
				t.Errorf("copy %d: got %+v, want the gate of the planned snapshot", i, from)
			}
			if f.waits[i] != nil {
				t.Errorf("copy %d: gate wait %v, want nil after the capture", i, f.waits[i])
			}
			continue
		}
		if from.Gate != nil || from.Snapshot.ID != "sn-done" || from.Snapshot.Dir != "/done" {
			t.Errorf("copy %d: got %+v, want the captured snapshot", i, from)
		}
	}
	if len(r.ids) != 5 || r.sn.ID != "sn-done" || len(f.rm.sorted()) != 0 {
		t.Errorf("got %v on %s, removed %v", r.ids, r.sn.ID, f.rm.sorted())
	}
}

// TestForkCaptureFails: a failed capture fails its staged copies through
// their gate, removes those that recorded an id, and starts no other.
func TestForkCaptureFails(t *testing.T) {
	full := errors.New("disk full")
	f, r := runStaged(t, 4, 2, full, func(i int) (string, error) {
		if i == 0 {
			return "sb-0", errors.New("recorded, then failed")
		}
		return "", errors.New("failed before its record")
	})
	if !errors.Is(r.err, full) || r.ids != nil {
		t.Fatalf("got %v, %v; want the capture's error", r.ids, r.err)
	}
	for i := range 2 {
		if !errors.Is(f.waits[i], full) {
			t.Errorf("copy %d: gate wait %v, want the capture's error", i, f.waits[i])
		}
	}
	if len(f.froms) != 2 {
		t.Errorf("copies started: %d, want the 2 staged ones", len(f.froms))
	}
	if got := f.rm.sorted(); !slices.Equal(got, []string{"sb-0"}) {
		t.Errorf("removed %v, want [sb-0]", got)
	}
}

// TestForkCaptureFailsUnstaged: without staging, a failed capture starts
// no copy.
func TestForkCaptureFailsUnstaged(t *testing.T) {
	full := errors.New("disk full")
	_, _, err := snapshot.Fork(context.Background(), snapshot.ForkPlan{Count: 3, Parallel: 2,
		Capture: func(context.Context, func(snapshot.Record)) (snapshot.Record, error) { return snapshot.Record{}, full },
		Start: func(context.Context, int, snapshot.From) (string, error) {
			t.Error("a copy started after a failed capture")
			return "", nil
		},
		Remove: func(context.Context, string) { t.Error("Remove without copies") },
	})
	if !errors.Is(err, full) {
		t.Errorf("got %v, want the capture's error", err)
	}
}

// TestForkCopyFails: a failed copy fails the fork, and the copies that
// succeeded are removed (the failed one is its Start's to clean up).
func TestForkCopyFails(t *testing.T) {
	bad := errors.New("no memory")
	var rm removals
	ids, _, err := snapshot.Fork(context.Background(), snapshot.ForkPlan{Count: 4, Parallel: 2,
		Capture: func(context.Context, func(snapshot.Record)) (snapshot.Record, error) {
			return snapshot.Record{ID: "sn-1"}, nil
		},
		Start: func(_ context.Context, i int, _ snapshot.From) (string, error) {
			if i == 2 {
				return "sb-2", bad
			}
			return fmt.Sprintf("sb-%d", i), nil
		},
		Remove: rm.remove,
	})
	if !errors.Is(err, bad) || ids != nil {
		t.Fatalf("got %v, %v; want the copy's error", ids, err)
	}
	if got, want := rm.sorted(), []string{"sb-0", "sb-1", "sb-3"}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
}

func TestForkNeedsACopy(t *testing.T) {
	for _, n := range []int{0, -1} {
		_, _, err := snapshot.Fork(context.Background(), snapshot.ForkPlan{Count: n,
			Capture: func(context.Context, func(snapshot.Record)) (snapshot.Record, error) {
				t.Error("captured for no copy")
				return snapshot.Record{}, nil
			},
		})
		if err == nil {
			t.Errorf("count %d: no error", n)
		}
	}
}

func TestGate(t *testing.T) {
	full := errors.New("disk full")
	for _, tc := range []struct {
		name   string
		open   bool
		err    error
		cancel bool
		want   error
	}{
		{name: "written", open: true},
		{name: "failed", open: true, err: full, want: full},
		{name: "cancelled", cancel: true, want: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := snapshot.NewGate(snapshot.Record{ID: "sn-1"})
			if g.Planned().ID != "sn-1" {
				t.Errorf("planned: got %+v", g.Planned())
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			waited := make(chan error, 1)
			go func() { waited <- g.Wait(ctx) }()
			if tc.open {
				g.Open(tc.err)
			}
			if tc.cancel {
				cancel()
			}
			err := recv(t, waited, "end of the wait")
			if (tc.want == nil) != (err == nil) || !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}
