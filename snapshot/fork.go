package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Gate hands the copies of a fork that started during its capture (staged
// copies) the capture's end: they wait on it before they load the
// snapshot that the capture was writing.
type Gate struct {
	planned Record // the snapshot being made
	done    chan struct{}
	err     error // the capture's, set before done closes
}

// NewGate returns the gate of a capture making planned.
func NewGate(planned Record) *Gate {
	return &Gate{planned: planned, done: make(chan struct{})}
}

// Planned is the snapshot being captured.
func (g *Gate) Planned() Record { return g.planned }

// Open ends the wait of the copies on g with the capture's err (nil: the
// snapshot is written). Call it once.
func (g *Gate) Open(err error) {
	g.err = err
	close(g.done)
}

// Wait returns once the capture ended, with its error, or ctx's.
func (g *Gate) Wait(ctx context.Context) error {
	select {
	case <-g.done:
		if g.err != nil {
			return fmt.Errorf("the fork's snapshot failed: %w", g.err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// failed reports whether the capture ended with an error.
func (g *Gate) failed() bool {
	select {
	case <-g.done:
		return g.err != nil
	default:
		return false
	}
}

// From is where one copy of a fork starts: Snapshot, written, or, with
// Gate set, the snapshot being captured (Gate.Planned), which the copy
// loads once Gate opens.
type From struct {
	Snapshot Record
	Gate     *Gate
}

// ForkPlan is one fork: a capture of the parent and count copies of it.
// The caller owns the records, networks and cgroups: Start makes one copy
// with them, and Remove deletes one that must not outlive a failed fork.
type ForkPlan struct {
	// Count copies, Parallel of them starting at once (at least 1).
	Count, Parallel int
	// Staged starts the first Parallel copies while the capture runs (the
	// driver can stage restores, vmm.Stager).
	Staged bool
	// Capture snapshots the parent; with Staged it calls planned, inside
	// the capture, with the snapshot being made (Options.Planned).
	Capture func(ctx context.Context, planned func(Record)) (Record, error)
	// Start makes copy i from from and returns its id ("" if it made
	// nothing): an id with an error names a copy that failed after it was
	// recorded.
	Start func(ctx context.Context, i int, from From) (string, error)
	// Remove deletes copy id of a fork that failed.
	Remove func(ctx context.Context, id string)
}

// Fork runs p: it captures the parent and starts p.Count copies, the
// first ones during the capture where p.Staged allows. It returns the
// copies' ids in order and the snapshot they run on. If the capture or
// any copy fails, the copies that started are removed, and so are those
// the capture failed (records the caller never learns of).
func Fork(ctx context.Context, p ForkPlan) ([]string, Record, error) {
	if p.Count < 1 {
		return nil, Record{}, errors.New("snapshot: a fork needs at least one copy")
	}
	f := &forkRun{p: p, ctx: ctx, ids: make([]string, p.Count), errs: make([]error, p.Count),
		slots: make(chan struct{}, max(1, p.Parallel))}
	var planned func(Record)
	if p.Staged {
		planned = f.stage
	}
	sn, err := p.Capture(ctx, planned)
	f.captured(sn, err)
	f.wg.Wait()
	if err == nil {
		err = errors.Join(f.errs...)
	}
	if err != nil {
		f.remove()
		return nil, Record{}, err
	}
	return f.ids, sn, nil
}

// forkRun starts the copies of one Fork.
type forkRun struct {
	p   ForkPlan
	ctx context.Context
	// slots: the copies start p.Parallel at a time; each start is CPU
	// work (the VMM's start, the guest's wake), and more at once than the
	// host has CPUs only makes them take turns.
	slots chan struct{}
	wg    sync.WaitGroup
	ids   []string
	errs  []error
	// next is the first copy not started yet; gate, if set, is the
	// capture's end for the copies stage started.
	next int
	gate *Gate
}

// stage starts as many copies as there are slots on sn, the snapshot the
// capture makes. It runs inside the capture.
func (f *forkRun) stage(sn Record) {
	f.gate = NewGate(sn)
	for f.next < len(f.ids) && len(f.slots) < cap(f.slots) {
		f.slots <- struct{}{} // free: no copy ran before
		f.start(From{Snapshot: sn, Gate: f.gate}, false)
	}
}

// captured ends the staged copies' wait with the capture's err and, if the
// capture made sn, starts the other copies from it.
func (f *forkRun) captured(sn Record, err error) {
	if f.gate != nil {
		f.gate.Open(err)
	}
	if err != nil {
		return
	}
	for f.next < len(f.ids) {
		f.start(From{Snapshot: sn}, true)
	}
}

// start starts copy f.next from from; take is set when it has to take a
// slot first (stage took it already).
func (f *forkRun) start(from From, take bool) {
	i := f.next
	f.next++
	f.wg.Go(func() {
		if take {
			f.slots <- struct{}{}
		}
		defer func() { <-f.slots }()
		f.ids[i], f.errs[i] = f.p.Start(f.ctx, i, from)
	})
}

// remove deletes the copies of a fork that failed: those that started,
// and, when the capture failed, those it failed.
func (f *forkRun) remove() {
	captureFailed := f.gate != nil && f.gate.failed()
	for i, id := range f.ids {
		if id != "" && (f.errs[i] == nil || captureFailed) {
			f.p.Remove(context.WithoutCancel(f.ctx), id)
		}
	}
}
