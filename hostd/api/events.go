package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
)

// EventLog is the flight recorder as the events route reads it
// (*recorder.Recorder implements it).
type EventLog interface {
	List(ctx context.Context, q store.EventQuery) ([]store.Event, error)
	// Known reports whether a sandbox (maybe deleted) has events.
	Known(ctx context.Context, id string) (bool, error)
	// Subscribe wakes the caller after new events of a sandbox.
	Subscribe(id string) (<-chan struct{}, func())
	// Record appends an event caused by ctx's request.
	Record(ctx context.Context, id, typ string, data any)
}

var _ EventLog = (*recorder.Recorder)(nil)

// exportPage is the page size of JSON Lines exports and follows.
const exportPage = 1000

var errNoEvents = &apiError{status: http.StatusNotImplemented, code: CodeNotImplemented, msg: "this hostd keeps no event log"}

func (s *server) ListSandboxEvents(w http.ResponseWriter, r *http.Request, id SandboxID, params ListSandboxEventsParams) {
	if s.events == nil {
		s.writeError(w, r, errNoEvents)
		return
	}
	q, err := eventQuery(id, params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.sandboxHasLog(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	jsonl := (params.Format != nil && *params.Format == ListSandboxEventsParamsFormatJsonl) || strings.Contains(r.Header.Get("Accept"), "application/x-ndjson")
	switch {
	case params.Follow != nil && *params.Follow:
		s.followEvents(w, r, q)
	case jsonl:
		s.exportEvents(w, r, q, params.Limit != nil)
	default:
		evs, err := s.events.List(r.Context(), q)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		out := AuditEventList{Events: make([]AuditEvent, 0, len(evs)), NextAfter: q.After}
		for _, e := range evs {
			out.Events = append(out.Events, toAuditEvent(e))
			out.NextAfter = e.ID
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// sandboxHasLog answers 404 for a sandbox that neither exists nor left a log.
func (s *server) sandboxHasLog(ctx context.Context, id string) error {
	_, err := s.m.Get(ctx, id)
	if !errors.Is(err, sandbox.ErrNotFound) {
		return err
	}
	if ok, kerr := s.events.Known(ctx, id); kerr != nil || ok {
		return kerr
	}
	return err
}

func eventQuery(id string, p ListSandboxEventsParams) (store.EventQuery, error) {
	q := store.EventQuery{SandboxID: id, Limit: exportPage}
	if p.Type != nil {
		for _, t := range *p.Type {
			if !t.Valid() {
				return q, badRequest(CodeInvalidParam, "type %q is not one of %s", t, strings.Join(recorder.Types, ", "))
			}
			q.Types = append(q.Types, string(t))
		}
	}
	if p.Since != nil {
		q.Since = *p.Since
	}
	if p.Until != nil {
		q.Until = *p.Until
	}
	if p.After != nil {
		q.After = *p.After
	}
	if p.Limit != nil {
		q.Limit = *p.Limit
	}
	if q.After < 0 || q.Limit < 1 || q.Limit > 10000 {
		return q, badRequest(CodeInvalidParam, "after must be >= 0 and limit 1..10000")
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return q, badRequest(CodeInvalidParam, "until is before since")
	}
	return q, nil
}

// lineWriter writes events as JSON Lines, flushing each batch.
type lineWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (l *lineWriter) write(evs []store.Event) error {
	if !l.started {
		l.started = true
		startNDJSON(l.w, l.rc)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range evs {
		if err := enc.Encode(toAuditEvent(e)); err != nil {
			return err
		}
	}
	if _, err := l.w.Write(buf.Bytes()); err != nil {
		return err
	}
	return l.rc.Flush()
}

// writePage lists the events q selects and writes them (the headers at
// least, the first time). It reports a failure itself and then says !ok.
func (s *server) writePage(r *http.Request, lw *lineWriter, q store.EventQuery) ([]store.Event, bool) {
	evs, err := s.events.List(r.Context(), q)
	if err == nil && (len(evs) > 0 || !lw.started) {
		err = lw.write(evs)
	}
	if err != nil {
		s.streamError(lw.w, r, lw.started, err)
		return nil, false
	}
	return evs, true
}

// exportEvents writes every event q selects (or q.Limit of them, when
// limited) as JSON Lines.
func (s *server) exportEvents(w http.ResponseWriter, r *http.Request, q store.EventQuery, limited bool) {
	lw := &lineWriter{w: w, rc: http.NewResponseController(w)}
	left := q.Limit
	if !limited {
		q.Limit = exportPage
	}
	for {
		evs, ok := s.writePage(r, lw, q)
		if !ok {
			return
		}
		left -= len(evs)
		if len(evs) < q.Limit || (limited && left <= 0) {
			return
		}
		q.After = evs[len(evs)-1].ID
		if limited {
			q.Limit = min(q.Limit, left)
		}
	}
}

// followEvents writes the events q selects as JSON Lines, then each new one,
// until the client goes or the sandbox's deletion is written.
func (s *server) followEvents(w http.ResponseWriter, r *http.Request, q store.EventQuery) {
	wake, stop := s.events.Subscribe(q.SandboxID)
	defer stop()
	lw := &lineWriter{w: w, rc: http.NewResponseController(w)}
	q.Limit = exportPage
	for {
		evs, ok := s.writePage(r, lw, q)
		if !ok {
			return
		}
		for _, e := range evs {
			q.After = e.ID
			if isDeletion(e) {
				return
			}
		}
		if len(evs) == exportPage {
			continue
		}
		// A type filter may hide the deletion event: look for the sandbox.
		if len(evs) == 0 && len(q.Types) > 0 && lw.started {
			if _, err := s.m.Get(r.Context(), q.SandboxID); errors.Is(err, sandbox.ErrNotFound) {
				return
			}
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
	}
}

func isDeletion(e store.Event) bool {
	if e.Type != recorder.TypeLifecycle {
		return false
	}
	var d recorder.LifecycleData
	return json.Unmarshal(e.Data, &d) == nil && d.Action == recorder.ActionState && d.State == string(sandbox.StateDeleted)
}

// streamError reports err as a JSON error if nothing was written yet, or
// ends the stream (the client sees it cut short) otherwise.
func (s *server) streamError(w http.ResponseWriter, r *http.Request, started bool, err error) {
	if !started {
		s.writeError(w, r, err)
		return
	}
	if !errors.Is(err, context.Canceled) {
		s.log.Error("events stream", "sandbox_id", r.PathValue("id"), "err", err)
	}
}

// toAuditEvent turns a stored event into the API's form: its data goes to
// the member its type names (each member is named as its type).
func toAuditEvent(e store.Event) AuditEvent {
	var out AuditEvent
	if slices.Contains(recorder.Types, e.Type) && len(e.Data) > 0 {
		wrapped := append(append([]byte(`{"`+e.Type+`":`), e.Data...), '}')
		_ = json.Unmarshal(wrapped, &out)
	}
	out.ID, out.SandboxID, out.Time, out.Type = e.ID, e.SandboxID, e.Time, AuditEventType(e.Type)
	out.TraceID, out.SpanID, out.APIKey = optString(e.TraceID), optString(e.SpanID), optString(e.APIKey)
	return out
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
