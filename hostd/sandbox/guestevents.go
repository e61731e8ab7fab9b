package sandbox

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/hostd/recorder"
)

// Guest events (files that commands wrote, packages they installed) are
// pulled from the guest's ring (proto Events.Next) into the log: by a long
// poll per running sandbox, and at once when an exec ends, so that its
// file and package events come before its end event.

// guestPollWait is how long one long poll waits in the guest.
const guestPollWait = 5 * time.Second

// guestBatch caps the events of one pull.
const guestBatch = 512

// guestPollGap is the least time between two long polls. Without it a
// burst of file writes would cost one round trip over the agent channel per
// event, paid for by the guest's CPU; with it, a burst comes in batches.
// (An exec's end drains at once, so no event waits for this.)
const guestPollGap = 250 * time.Millisecond

// guestCursor is the position of hostd's reader in a sandbox's guest ring.
// mu orders the recording: one batch at a time, never one twice.
type guestCursor struct {
	mu    sync.Mutex
	after uint64
	// off is set when the guest serves no events (an older guestinit).
	off bool
	// watchErr is the last watch error reported, so it is logged once.
	watchErr string
	// lim bounds the guest events recorded (nil until the first batch).
	lim *rate.Limiter
}

// A guest's events are recorded at most at guestEventRate a second, with
// bursts of guestEventBurst: a guest that floods (or forges) events fills
// the log at that pace, and the rest count as lost.
const (
	guestEventRate  = 500
	guestEventBurst = 5000
)

func (f *recorderFeed) cursorOf(id string) *guestCursor { return &f.reg.get(id).rec.guest }

// startGuestEvents places a new reader at the guest's newest event (what
// happened before the sandbox was handed out, or in the parent of a fork,
// is not its story), then long-polls until b goes.
func (f *recorderFeed) startGuest(ctx context.Context, b *runningVM) {
	if f.r == nil {
		return
	}
	g := f.cursorOf(b.id)
	g.mu.Lock()
	fresh := g.after == math.MaxUint64
	g.mu.Unlock()
	if fresh {
		if err := f.pullGuest(ctx, b, g, 0); err != nil {
			f.log.Debug("guest events", "sandbox_id", b.id, "err", err)
		}
	}
	f.spawn(func() { f.pollGuest(b, g) })
}

func (f *recorderFeed) pollGuest(b *runningVM, g *guestCursor) {
	ctx, cancel := b.bind(context.Background())
	defer cancel()
	for ctx.Err() == nil {
		start := time.Now()
		err := f.pullGuest(ctx, b, g, guestPollWait)
		g.mu.Lock()
		off := g.off
		g.mu.Unlock()
		if off {
			return
		}
		gap := guestPollGap - time.Since(start)
		if err != nil {
			gap = time.Second
		}
		if gap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(gap):
			}
		}
	}
}

// caughtUp reports whether sandbox id's reader has recorded every guest
// event up to seq head, so an exit that the guest says came at head needs
// no pull. A new reader (not placed yet) or one that is off has not.
func (f *recorderFeed) caughtUp(id string, head uint64) bool {
	if f.r == nil {
		return true
	}
	g := f.cursorOf(id)
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.off && g.after != math.MaxUint64 && head <= g.after
}

// drainGuest records every guest event already in the ring.
func (f *recorderFeed) drainGuest(ctx context.Context, b *runningVM) {
	if f.r == nil {
		return
	}
	g := f.cursorOf(b.id)
	for range 64 {
		g.mu.Lock()
		after, off := g.after, g.off
		g.mu.Unlock()
		if off || f.pullGuest(ctx, b, g, 0) != nil {
			return
		}
		g.mu.Lock()
		done := g.after == after
		g.mu.Unlock()
		if done {
			return
		}
	}
}

// pullGuest reads one batch above the cursor and records it.
func (f *recorderFeed) pullGuest(ctx context.Context, b *runningVM, g *guestCursor, wait time.Duration) error {
	c, err := b.client(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	after := g.after
	g.mu.Unlock()
	evs, err := c.NextEvents(ctx, after, wait, guestBatch)
	if status.Code(err) == codes.Unimplemented || status.Code(errors.Unwrap(err)) == codes.Unimplemented {
		g.mu.Lock()
		g.off = true
		g.mu.Unlock()
		f.log.Info("guest serves no events (older guestinit)", "sandbox_id", b.id)
		return err
	}
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.after != after {
		return nil // another pull recorded this batch
	}
	f.recordGuest(b.id, g, evs)
	return nil
}

// recordGuest records a batch and moves the cursor. Call with g.mu held.
func (f *recorderFeed) recordGuest(id string, g *guestCursor, evs agentclient.GuestEvents) {
	var entries []recorder.Entry
	if evs.WatchError != g.watchErr {
		g.watchErr = evs.WatchError
		entries = append(entries, recorder.Entry{SandboxID: id, Type: recorder.TypeRecorder, Data: recorder.RecorderData{WatchError: evs.WatchError}})
	}
	if g.after == math.MaxUint64 {
		// A new reader: start after the newest event, record none.
		g.after = evs.Head
		f.r.Add(context.Background(), entries...)
		return
	}
	if g.lim == nil {
		g.lim = rate.NewLimiter(guestEventRate, guestEventBurst)
	}
	lost := evs.Lost
	var recorded []recorder.Entry
	for _, e := range evs.Events {
		g.after = max(g.after, e.Seq)
		if !g.lim.Allow() {
			lost++
			continue
		}
		if en, ok := f.guestEntry(id, e); ok {
			recorded = append(recorded, en)
		}
	}
	if lost > 0 {
		entries = append(entries, recorder.Entry{SandboxID: id, Type: recorder.TypeRecorder, Data: recorder.RecorderData{Lost: lost}})
	}
	entries = append(entries, recorded...)
	if len(evs.Events) == 0 && evs.Head < g.after {
		g.after = evs.Head // the guest restarted its ring (a new boot)
	}
	f.r.Add(context.Background(), entries...)
}

// guestEntry is the log entry of one guest event (false for a kind it
// does not know).
func (f *recorderFeed) guestEntry(id string, e agentclient.GuestEvent) (recorder.Entry, bool) {
	var cause recorder.Cause
	if en := f.reg.find(id); en != nil {
		cause, _ = en.rec.causeOf(e.ExecID)
	}
	en := recorder.Entry{SandboxID: id, Cause: cause, Time: hostTime(e.Time)}
	switch {
	case e.File != nil:
		f := e.File
		en.Type, en.Data = recorder.TypeFile, recorder.FileData{Op: f.Op, Path: f.Path, OldPath: f.OldPath, Dir: f.Dir, Size: f.Size,
			SHA256: f.SHA256, Source: recorder.SourceGuest, ExecID: e.ExecID}
	case e.Package != nil:
		p := e.Package
		en.Type, en.Data = recorder.TypePackage, recorder.PackageData{Manager: p.Manager, Action: p.Action, Name: p.Name,
			Version: p.Version, OldVersion: p.OldVersion, Path: p.Path, ExecID: e.ExecID}
	case e.OOM != nil:
		en.Type, en.Data = recorder.TypeLifecycle, oomData(e)
	default:
		return en, false
	}
	return en, true
}
