package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
)

// Bounds of a moved sandbox's open execs (they come from the snapshot
// store, which another host wrote).
const (
	maxMovedExecs    = 256
	maxMovedArgv     = 1024
	maxMovedArgBytes = 64 << 10
	// maxMovedExecBytes bounds their JSON in the manifest's Meta (whose
	// bound, chunks.MaxMetaBytes, a pause must never pass).
	maxMovedExecBytes = 256 << 10
)

// movedExec is an exec that had started and not ended when its sandbox
// was paused: its start event, which the importing host writes to its own
// flight recorder so that its resume takes the exec over (records its end,
// kills it at its timeout) as a resume after a hostd restart does. Its
// session and output are the guest's and move with its memory.
type movedExec struct {
	Data    recorder.ExecData `json:"data"`
	APIKey  string            `json:"api_key,omitempty"`
	TraceID string            `json:"trace_id,omitempty"`
	SpanID  string            `json:"span_id,omitempty"`
}

// openExecsOf are sandbox id's open execs from the flight recorder's log,
// at most maxMovedExecs, the newest kept (nil without a recorder).
func (m *Manager) openExecsOf(ctx context.Context, id string) ([]movedExec, error) {
	t := m.takeover
	if t.rec.r == nil || t.events == nil {
		return nil, nil
	}
	open, err := t.openExecs(ctx, id)
	if err != nil {
		return nil, err
	}
	// The newest first, within the bounds; the oldest are left out.
	var out []movedExec
	size := 0
	for i := len(open) - 1; i >= 0 && len(out) < maxMovedExecs; i-- {
		o := open[i]
		me := movedExec{Data: o.data, APIKey: o.cause.Key}
		if o.cause.Span.IsValid() {
			me.TraceID, me.SpanID = o.cause.Span.TraceID().String(), o.cause.Span.SpanID().String()
		}
		b, err := json.Marshal(me)
		if err != nil || size+len(b) > maxMovedExecBytes || validMovedExecs([]movedExec{me}) != nil {
			continue
		}
		size += len(b)
		out = append(out, me)
	}
	if len(out) < len(open) {
		m.log.Warn("paused sandbox: only its newest open execs go with it", "sandbox_id", id, "open", len(open), "kept", len(out))
	}
	slices.Reverse(out)
	return out, nil
}

// validMovedExecs refuses open execs out of bounds.
func validMovedExecs(execs []movedExec) error {
	if len(execs) > maxMovedExecs {
		return fmt.Errorf("%d open execs, over %d", len(execs), maxMovedExecs)
	}
	for _, e := range execs {
		d := e.Data
		n := 0
		for _, a := range d.Argv {
			n += len(a)
		}
		switch {
		case d.ExecID == "" || len(d.ExecID) > 128:
			return fmt.Errorf("an exec id of %d bytes", len(d.ExecID))
		case d.Phase == recorder.PhaseEnd:
			return fmt.Errorf("exec %s: an end event", d.ExecID)
		case len(d.Argv) > maxMovedArgv || n > maxMovedArgBytes || len(d.EnvKeys) > maxMovedArgv || len(d.Cwd) > 4096:
			return fmt.Errorf("exec %s: its command is over bounds", d.ExecID)
		case d.TimeoutS < 0 || d.Started.IsZero():
			return fmt.Errorf("exec %s: timeout %d, started %v", d.ExecID, d.TimeoutS, d.Started)
		case len(e.APIKey) > 256 || len(e.TraceID) > 64 || len(e.SpanID) > 64:
			return fmt.Errorf("exec %s: its cause is over bounds", d.ExecID)
		}
	}
	return nil
}

// recordMovedExecs writes an imported sandbox's open execs to this host's
// flight recorder and marks the sandbox so that its resume takes them
// over.
func (m *Manager) recordMovedExecs(ctx context.Context, id string, execs []movedExec) {
	if len(execs) == 0 || m.rec.r == nil {
		return
	}
	entries := make([]recorder.Entry, 0, len(execs))
	for _, e := range execs {
		cause := causeOf(store.Event{APIKey: e.APIKey, TraceID: e.TraceID, SpanID: e.SpanID})
		entries = append(entries, recorder.Entry{SandboxID: id, Type: recorder.TypeExec, Cause: cause, Time: e.Data.Started, Data: e.Data})
	}
	m.rec.r.Add(ctx, entries...)
	m.reg.get(id).markEarlierExecs()
}
