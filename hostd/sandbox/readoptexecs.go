package sandbox

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
)

// maxExecEventPages bounds how much of a sandbox's log a re-adoption reads
// for its open execs (pages of store.ListEvents' 1000).
const maxExecEventPages = 200

// takeover takes over the execs of an earlier hostd (see run).
type takeover struct {
	reg      *registry
	rec      *recorderFeed
	log      *slog.Logger
	events   eventLister // nil: no log to read
	timeouts *execTimeouts
}

// run takes over, after a hostd restart, the execs that the
// previous hostd started and saw no end of, from their start events in the
// flight recorder's log: it waits for each one's end again (and records
// it), and arms its timeout for what is left of it (one already past kills
// at once). It runs at a re-adoption and at a resume (the sandbox may have
// been paused across the restart); execs this hostd tracks are its own
// already. Without a recorder there is no log and nothing to take over.
func (t *takeover) run(ctx context.Context, b *runningVM) {
	if t.rec.r == nil || t.events == nil {
		return
	}
	open, err := t.openExecs(ctx, b.id)
	if err != nil {
		t.log.Warn("execs of the previous hostd not taken over", "sandbox_id", b.id, "err", err)
	}
	taken := 0
	for _, o := range open {
		if t.reg.get(b.id).rec.find(o.data.ExecID) != nil {
			continue
		}
		taken++
		tr := &execTrack{cause: o.cause, started: o.data.Started, data: o.data, done: make(chan struct{})}
		execID := o.data.ExecID
		t.reg.get(b.id).rec.add(execID, tr)
		t.rec.spawn(func() { t.rec.awaitExec(b, execID, tr) })
		if o.data.TimeoutS > 0 {
			left := time.Until(o.data.Started.Add(time.Duration(o.data.TimeoutS) * time.Second))
			t.timeouts.arm(b.id, execID, max(left, time.Nanosecond))
		}
	}
	if taken > 0 {
		t.log.Info("execs of the previous hostd taken over", "sandbox_id", b.id, "count", taken)
	}
}

// eventLister reads the flight recorder's log (*store.Store does).
type eventLister interface {
	ListEvents(ctx context.Context, q store.EventQuery) ([]store.Event, error)
}

// markEarlierExecs notes that e's sandbox was paused when this hostd
// started, so its first resume looks for execs to take over.
func (e *entry) markEarlierExecs() {
	e.mu.Lock()
	e.earlierExecs = true
	e.mu.Unlock()
}

// takeEarlierExecs reports, once, whether e's resume should take over an
// earlier hostd's execs.
func (e *entry) takeEarlierExecs() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.earlierExecs
	e.earlierExecs = false
	return t
}

// openExec is an exec whose start is in the log and its end is not.
type openExec struct {
	data  recorder.ExecData
	cause recorder.Cause
}

// openExecs reads sandbox id's exec events, oldest first, and returns the
// execs that started and did not end.
func (t *takeover) openExecs(ctx context.Context, id string) ([]openExec, error) {
	var order []string
	open := map[string]openExec{}
	var after int64
	for range maxExecEventPages {
		evs, err := t.events.ListEvents(ctx, store.EventQuery{SandboxID: id, Types: []string{recorder.TypeExec}, After: after})
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			after = ev.ID
			var d recorder.ExecData
			if json.Unmarshal(ev.Data, &d) != nil || d.ExecID == "" {
				continue
			}
			if d.Phase == recorder.PhaseEnd {
				delete(open, d.ExecID)
				continue
			}
			if _, seen := open[d.ExecID]; !seen {
				order = append(order, d.ExecID)
			}
			open[d.ExecID] = openExec{data: d, cause: causeOf(ev)}
		}
		if len(evs) == 0 {
			break
		}
	}
	out := make([]openExec, 0, len(open))
	for _, execID := range order {
		if o, ok := open[execID]; ok {
			out = append(out, o)
		}
	}
	return out, nil
}

// causeOf is the cause a recorded event names: its request's span and key.
func causeOf(ev store.Event) recorder.Cause {
	c := recorder.Cause{Key: ev.APIKey}
	tid, err1 := trace.TraceIDFromHex(ev.TraceID)
	sid, err2 := trace.SpanIDFromHex(ev.SpanID)
	if err1 == nil && err2 == nil {
		c.Span = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	}
	return c
}
