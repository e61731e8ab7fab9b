// Package recorder is the flight recorder (DESIGN R13): one ordered event log
// per sandbox, kept in hostd's store, followed live, linked to the callers'
// W3C traces, and optionally exported as OpenTelemetry spans.
//
// An event's cause is the trace span and API key of the request that led to
// it. Events that hostd sees later (a guest's file writes, an exec's end, the
// proxy's connections) carry the cause of the exec that made them.
package recorder

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/hostd/store"
)

// Event types.
const (
	TypeExec      = "exec"
	TypeFile      = "file"
	TypePackage   = "package"
	TypeNetwork   = "network"
	TypeLifecycle = "lifecycle"
	TypeAPI       = "api"
	// TypeRecorder reports on the log itself (guest events it lost).
	TypeRecorder = "recorder"
)

// Types lists every event type.
var Types = []string{TypeExec, TypeFile, TypePackage, TypeNetwork, TypeLifecycle, TypeAPI, TypeRecorder}

// Store keeps the log (*store.Store implements it).
type Store interface {
	AddEvents(ctx context.Context, evs []store.Event) error
	ListEvents(ctx context.Context, q store.EventQuery) ([]store.Event, error)
	HasEvents(ctx context.Context, id string) (bool, error)
	DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error)
}

// Cause links an event to what caused it.
type Cause struct {
	// Span is the caller's span (its trace id is the caller's trace).
	Span trace.SpanContext
	// Key names the API key of the request.
	Key string
}

// Entry is one event to record.
type Entry struct {
	SandboxID string
	Type      string
	Cause     Cause
	// Time defaults to now.
	Time time.Time
	// Start, if set, is when the event began (an exec's end event); the
	// exported span runs from Start to Time.
	Start time.Time
	// Data is the type's payload, marshalled to JSON.
	Data any
}

// Options configure New.
type Options struct {
	Store Store
	// Tracer exports each caused event as a span; nil exports none.
	Tracer trace.Tracer
	// KeyName names the API key of ctx's request; nil names none.
	KeyName func(ctx context.Context) string
	// Counted, if set, is told how many events of each type were stored.
	Counted func(typ string, n int)
	Logger  *slog.Logger
}

// Recorder appends events and wakes their followers.
type Recorder struct {
	opts Options
	log  *slog.Logger
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// New returns a recorder writing to opts.Store.
func New(opts Options) *Recorder {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{opts: opts, log: log, subs: map[string]map[chan struct{}]struct{}{}}
}

// CauseOf returns the cause of ctx's request: its span and API key.
func (r *Recorder) CauseOf(ctx context.Context) Cause {
	c := Cause{Span: trace.SpanContextFromContext(ctx)}
	if r != nil && r.opts.KeyName != nil {
		c.Key = r.opts.KeyName(ctx)
	}
	return c
}

// Record appends one event of sandbox id caused by ctx's request. A nil
// Recorder records nothing, so tests may leave it out.
func (r *Recorder) Record(ctx context.Context, id, typ string, data any) {
	if r == nil {
		return
	}
	r.Add(ctx, Entry{SandboxID: id, Type: typ, Cause: r.CauseOf(ctx), Data: data})
}

// Add appends entries in order, in one transaction. A store failure is
// logged: an audit write never fails the action it describes.
func (r *Recorder) Add(ctx context.Context, entries ...Entry) {
	if r == nil || len(entries) == 0 {
		return
	}
	evs := make([]store.Event, 0, len(entries))
	for i := range entries {
		e := &entries[i]
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		data, err := json.Marshal(e.Data)
		if err != nil {
			r.log.Error("recorder: encode event", "sandbox_id", e.SandboxID, "type", e.Type, "err", err)
			data = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
		}
		ev := store.Event{SandboxID: e.SandboxID, Time: e.Time.UTC(), Type: e.Type, APIKey: e.Cause.Key, Data: data}
		if e.Cause.Span.IsValid() {
			ev.TraceID, ev.SpanID = e.Cause.Span.TraceID().String(), e.Cause.Span.SpanID().String()
		}
		evs = append(evs, ev)
	}
	// The caller's ctx may be ending (a client that went away); the record
	// of what it did must still be written.
	if err := r.opts.Store.AddEvents(context.WithoutCancel(ctx), evs); err != nil {
		r.log.Error("recorder: store events", "sandbox_id", evs[0].SandboxID, "count", len(evs), "err", err)
		return
	}
	r.export(entries, evs)
	r.wake(evs)
	if r.opts.Counted != nil {
		counts := map[string]int{}
		for _, e := range evs {
			counts[e.Type]++
		}
		for t, n := range counts {
			r.opts.Counted(t, n)
		}
	}
}

// Subscribe returns a channel that receives a value after new events of
// sandbox id are stored, and a func that ends the subscription.
func (r *Recorder) Subscribe(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	if r.subs[id] == nil {
		r.subs[id] = map[chan struct{}]struct{}{}
	}
	r.subs[id][ch] = struct{}{}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.subs[id], ch)
		if len(r.subs[id]) == 0 {
			delete(r.subs, id)
		}
		r.mu.Unlock()
	}
}

func (r *Recorder) wake(evs []store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.SandboxID] {
			continue
		}
		seen[e.SandboxID] = true
		for ch := range r.subs[e.SandboxID] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// List returns the events q selects.
func (r *Recorder) List(ctx context.Context, q store.EventQuery) ([]store.Event, error) {
	return r.opts.Store.ListEvents(ctx, q)
}

// Known reports whether sandbox id has a log.
func (r *Recorder) Known(ctx context.Context, id string) (bool, error) {
	return r.opts.Store.HasEvents(ctx, id)
}

// Prune drops the events recorded before t, of every sandbox.
func (r *Recorder) Prune(ctx context.Context, t time.Time) (int64, error) {
	return r.opts.Store.DeleteEventsBefore(ctx, t)
}
