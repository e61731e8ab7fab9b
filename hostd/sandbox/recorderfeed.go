package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/recorder"
)

// The manager's side of the flight recorder: lifecycle, exec, file (from
// the Files API and the guest), package and network events, each with the
// cause (trace span and API key) of the request behind it.

// execWaitStep is how long one Summary call waits in the guest.
const execWaitStep = 30 * time.Second

// endWait bounds how long an exec's exit waits for its end event.
const endWait = 10 * time.Second

// execTrack is what the recorder knows of one exec session.
type execTrack struct {
	cause   recorder.Cause
	started time.Time
	data    recorder.ExecData
	// done is closed once its end event is recorded.
	done chan struct{}
	// awaited is set while a goroutine waits for its end.
	awaited bool
	// ended is when it ended (zero while it runs). An ended exec is kept
	// for endGrace: the proxy may report its last connection just after.
	ended time.Time
}

// endGrace is how long an ended exec still takes network events.
const endGrace = 3 * time.Second

// execLog is the recorder's state of one sandbox, kept across its pauses
// in its entry: the exec sessions it tracks and the cursor in the guest's
// event ring.
type execLog struct {
	mu     sync.Mutex
	execs  map[string]*execTrack // exec id → track
	guest  guestCursor
	pruned time.Time // the last prune
}

func (r *execLog) init() {
	r.execs = map[string]*execTrack{}
	r.guest.after = math.MaxUint64
}

// add tracks a new exec, forgetting those that ended over endGrace ago.
func (r *execLog) add(execID string, t *execTrack) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune()
	t.awaited = true
	r.execs[execID] = t
}

// rename tracks exec from as to.
func (r *execLog) rename(from, to string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.execs[from]; ok {
		delete(r.execs, from)
		r.execs[to] = t
	}
}

// prune forgets execs that ended over endGrace ago, at most every
// endGrace/4: a walk of every track on each exec made a run of short execs
// quadratic. Call with mu held.
func (r *execLog) prune() {
	now := time.Now()
	if now.Sub(r.pruned) < endGrace/4 {
		return
	}
	r.pruned = now
	for execID, t := range r.execs {
		if t.over(now) {
			delete(r.execs, execID)
		}
	}
}

// over reports whether t ended over endGrace before now.
func (t *execTrack) over(now time.Time) bool {
	return !t.ended.IsZero() && now.Sub(t.ended) > endGrace
}

// find returns exec execID's track, or nil.
func (r *execLog) find(execID string) *execTrack {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.execs[execID]
}

// causeOf is the cause of exec session execID.
func (r *execLog) causeOf(execID string) (recorder.Cause, bool) {
	if t := r.find(execID); t != nil {
		return t.cause, true
	}
	return recorder.Cause{}, false
}

// active is the cause of the exec to which the sandbox's network traffic
// is attributed: its newest running exec, else the one that ended last
// within endGrace ("" exec id when there is none).
func (r *execLog) active() (recorder.Cause, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune()
	var best *execTrack
	var bestID string
	now := time.Now()
	for execID, t := range r.execs {
		if t.over(now) { // not pruned yet
			continue
		}
		if best == nil || (t.ended.IsZero() && !best.ended.IsZero()) || (t.ended.IsZero() == best.ended.IsZero() && t.started.After(best.started)) {
			best, bestID = t, execID
		}
	}
	if best == nil {
		return recorder.Cause{}, ""
	}
	return best.cause, bestID
}

// unawaited marks the execs whose wait a pause ended as awaited again and
// returns them.
func (r *execLog) unawaited() map[string]*execTrack {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*execTrack{}
	for execID, t := range r.execs {
		if !t.awaited {
			t.awaited = true
			out[execID] = t
		}
	}
	return out
}

// setAwaited sets whether a goroutine waits for t's end.
func (r *execLog) setAwaited(t *execTrack, v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.awaited = v
}

// markEnded stamps t's end.
func (r *execLog) markEnded(t *execTrack) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.ended = time.Now()
}

// recorderFeed is the manager's side of the recorderFeed recorder: it records
// lifecycle, exec, file, package and network events with their causes, and
// pulls the guest's events; its per-sandbox state is in each entry's rec.
type recorderFeed struct {
	r     *recorder.Recorder // nil: no log is kept
	reg   *registry
	spawn func(func()) bool
	log   *slog.Logger
}

// setState stores a sandbox's state and records the change.
func (m *Manager) setState(ctx context.Context, id string, st State, errMsg string, pid int) error {
	if err := m.opts.Store.SetSandboxState(ctx, id, string(st), errMsg, pid); err != nil {
		return err
	}
	m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionState, State: string(st), Reason: errMsg})
	return nil
}

func (f *recorderFeed) lifecycle(ctx context.Context, id string, d recorder.LifecycleData) {
	f.r.Record(ctx, id, recorder.TypeLifecycle, d)
}

// recordFile records a change made through the Files API.
func (f *recorderFeed) file(ctx context.Context, id string, d recorder.FileData) {
	d.Source = recorder.SourceAPI
	f.r.Record(ctx, id, recorder.TypeFile, d)
}

// execStart is what an exec's start event records.
type execStart struct {
	argv     []string
	cwd      string
	env      map[string]string
	tty      bool
	id       string
	timeoutS int
}

// on reports whether a log is kept.
func (f *recorderFeed) on() bool { return f.r != nil }

// execStarted records an exec's start and tracks it, before the guest is
// asked to start it: what the command does (files, network) comes after
// its start in the log, and is attributed to it. The caller reports how
// the start went with startDone. It returns nil when no log is kept.
func (f *recorderFeed) execStarted(ctx context.Context, b *runningVM, x execStart) *execTrack {
	if f.r == nil {
		return nil
	}
	t := &execTrack{cause: f.r.CauseOf(ctx), started: time.Now(), done: make(chan struct{})}
	keys := slices.Sorted(maps.Keys(x.env))
	t.data = recorder.ExecData{ExecID: x.id, Phase: recorder.PhaseStart, Argv: x.argv, Cwd: x.cwd, EnvKeys: keys, Tty: x.tty,
		Started: t.started.UTC(), TimeoutS: max(x.timeoutS, 0)}
	f.reg.get(b.id).rec.add(x.id, t)
	f.r.Add(ctx, recorder.Entry{SandboxID: b.id, Type: recorder.TypeExec, Cause: t.cause, Time: t.started, Data: t.data})
	return t
}

// startDone follows exec t (started as execID) once the guest answered
// its start with st or err: a start that failed ends it, an answer that
// holds the exit's summary records its end at once, and any other (the
// command runs, or the answer was lost) waits for the end in the
// background. An older guest that names the session itself has its track
// renamed.
func (f *recorderFeed) startDone(ctx context.Context, b *runningVM, execID string, t *execTrack, st agentclient.Started, err error) {
	if t == nil {
		return
	}
	if errors.Is(err, agentclient.ErrStart) {
		f.execEnded(b.id, execID, t, agentclient.Summary{}, "the command did not start: "+err.Error())
		return
	}
	if err == nil && st.ID != execID {
		f.reg.get(b.id).rec.rename(execID, st.ID)
		t.data.ExecID, execID = st.ID, st.ID
	}
	if err == nil && st.Summary != nil {
		f.exited(ctx, b, execID, t, *st.Summary)
		return
	}
	if err != nil {
		// The answer was lost: the guest may never have had the session.
		f.spawn(func() {
			f.awaitExecAs(b, execID, t, "the start's answer was lost and the guest has no such session: it may never have run")
		})
		return
	}
	f.spawn(func() { f.awaitExec(b, execID, t) })
}

// exited records the end of session execID, which sum says has exited,
// after every guest event it caused (none left to pull when the guest's
// event head at the exit is one the reader has passed).
func (f *recorderFeed) exited(ctx context.Context, b *runningVM, execID string, t *execTrack, sum agentclient.Summary) {
	if !sum.HasEventsHead || !f.caughtUp(b.id, sum.EventsHead) {
		f.drainGuest(ctx, b)
	}
	f.execEnded(b.id, execID, t, sum, "")
}

// awaitExec waits for session execID of b to exit, then records its end
// after every guest event it caused. It gives up when b goes (a pause
// hands the wait to the resumed box, see resumeExecs).
func (f *recorderFeed) awaitExec(b *runningVM, execID string, t *execTrack) {
	f.awaitExecAs(b, execID, t, "the guest no longer has the session")
}

// awaitExecAs is awaitExec, whose end says noSession when the guest has no
// session execID.
func (f *recorderFeed) awaitExecAs(b *runningVM, execID string, t *execTrack, noSession string) {
	ctx, cancel := b.bind(context.Background())
	defer cancel()
	for {
		c, err := b.client(ctx)
		var sum agentclient.Summary
		if err == nil {
			sum, err = c.Summary(ctx, execID, execWaitStep)
		}
		switch {
		case err == nil && sum.Exited:
			f.exited(ctx, b, execID, t, sum)
			return
		case errors.Is(err, agentclient.ErrNoSession):
			f.execEnded(b.id, execID, t, sum, noSession)
			return
		case err != nil:
			select {
			case <-b.gone:
				switch {
				case errors.Is(b.why, ErrHostdStopped):
					// The exec runs on: the next hostd takes it over
					// from its start event (readoptExecs).
				case errors.Is(b.why, ErrPaused):
					if e := f.reg.find(b.id); e != nil {
						e.rec.setAwaited(t, false)
					}
				default:
					f.execEnded(b.id, execID, t, sum, "the sandbox ended first")
				}
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// execEnded records an exec's end and releases those waiting for it.
func (f *recorderFeed) execEnded(id, execID string, t *execTrack, sum agentclient.Summary, why string) {
	d := t.data
	d.Phase = recorder.PhaseEnd
	// One clock for the sandbox's events, the recorder's: the start was
	// stamped by the host, so the end is the start plus the guest's own
	// measure of the run (both ends on the guest's clock), and never later
	// than now.
	end := time.Now()
	if !sum.Ended.IsZero() && !sum.Started.IsZero() && !sum.Ended.Before(sum.Started) {
		if e := t.started.Add(sum.Ended.Sub(sum.Started)); e.Before(end) {
			end = e
		}
	}
	endUTC := end.UTC()
	dur := end.Sub(t.started).Milliseconds()
	d.Ended, d.DurationMS, d.Error = &endUTC, &dur, why
	if sum.Exited {
		code := sum.Exit.Code
		d.ExitCode, d.Signal = &code, sum.Exit.Signal
		d.Stdout, d.Stderr = outputSummary(sum.Stdout), outputSummary(sum.Stderr)
	}
	f.r.Add(context.Background(), recorder.Entry{SandboxID: id, Type: recorder.TypeExec, Cause: t.cause,
		Time: end, Start: t.started, Data: d})
	if e := f.reg.find(id); e != nil { // a deleted sandbox keeps no entry
		e.rec.markEnded(t)
		if sum.Exited {
			e.disarmKill(execID) // its timeout has nothing left to kill
		}
	}
	close(t.done)
}

func outputSummary(s agentclient.StreamSummary) *recorder.OutputSummary {
	return &recorder.OutputSummary{Head: s.Head, Tail: s.Tail, TotalBytes: s.TotalBytes, SHA256: s.SHA256}
}

// waitEnd waits (briefly) until session execID's end event is recorded, so
// that a caller who saw the exit finds it in the log.
func (f *recorderFeed) waitEnd(ctx context.Context, id, execID string) {
	e := f.reg.find(id)
	if e == nil {
		return
	}
	t := e.rec.find(execID)
	if t == nil {
		return
	}
	select {
	case <-t.done:
	case <-ctx.Done():
	case <-time.After(endWait):
	}
}

// resumeExecs hands the execs whose wait a pause ended to the resumed box.
func (f *recorderFeed) resumeExecs(b *runningVM) {
	for execID, t := range f.reg.get(b.id).rec.unawaited() {
		f.spawn(func() { f.awaitExec(b, execID, t) })
	}
}

// RecordNetwork records an egress proxy event, attributed to the
// sandbox's newest running exec.
func (m *Manager) RecordNetwork(ev egress.Event) { m.rec.network(ev) }

func (f *recorderFeed) network(ev egress.Event) {
	var cause recorder.Cause
	var execID string
	if e := f.reg.find(ev.SandboxID); e != nil {
		cause, execID = e.rec.active()
	}
	f.r.Add(context.Background(), recorder.Entry{SandboxID: ev.SandboxID, Type: recorder.TypeNetwork, Cause: cause, Time: ev.Time,
		Data: recorder.NetworkData{Kind: ev.Kind, Host: ev.Host, Port: ev.Port, Method: ev.Method, Path: ev.Path, BytesOut: ev.BytesOut,
			BytesIn: ev.BytesIn, Allowed: ev.Allowed, Rule: ev.Rule, Status: ev.Status, ExecID: execID}})
}
