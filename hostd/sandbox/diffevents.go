package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
)

// EventsDiff is the two flight-recorder logs since the common snapshot,
// side by side: what both did first, in the same order, once (Common),
// then what each did after (A, B). Commands appear once, at their end
// (with the exit code); file writes, package installs and network calls
// as recorded. Truncated says a side had more than the limit.
type EventsDiff struct {
	Common, A, B []store.Event
	Truncated    bool
}

// diffEventTypes are what an events diff puts side by side.
var diffEventTypes = []string{recorder.TypeExec, recorder.TypeFile, recorder.TypePackage, recorder.TypeNetwork}

// eventsDiff reads both sides' windows (up to limit events each) and
// splits off their common prefix.
func (m *Manager) eventsDiff(ctx context.Context, p diffPlan, limit int) (EventsDiff, error) {
	if m.opts.Recorder == nil {
		return EventsDiff{}, fmt.Errorf("%w: this hostd keeps no flight recorder", ErrInvalid)
	}
	a, ta, err := m.windowEvents(ctx, p.wa, limit)
	if err != nil {
		return EventsDiff{}, err
	}
	b, tb, err := m.windowEvents(ctx, p.wb, limit)
	if err != nil {
		return EventsDiff{}, err
	}
	n := 0
	for n < len(a) && n < len(b) && eventSig(a[n]) == eventSig(b[n]) {
		n++
	}
	return EventsDiff{Common: a[:n], A: a[n:], B: b[n:], Truncated: ta || tb}, nil
}

// windowEvents are the events of the windows, oldest window first,
// without exec starts (an exec shows at its end).
func (m *Manager) windowEvents(ctx context.Context, ws []window, limit int) ([]store.Event, bool, error) {
	var out []store.Event
	// The windows are nearest first: the oldest writes come last.
	for i := len(ws) - 1; i >= 0; i-- {
		w := ws[i]
		q := store.EventQuery{SandboxID: w.SandboxID, Types: diffEventTypes, Since: w.Since, Until: w.Until, Limit: 1000}
		for {
			evs, err := m.opts.Recorder.List(ctx, q)
			if err != nil {
				return nil, false, err
			}
			for _, e := range evs {
				q.After = e.ID
				if e.Type == recorder.TypeExec {
					var d recorder.ExecData
					if json.Unmarshal(e.Data, &d) != nil || d.Phase != recorder.PhaseEnd {
						continue
					}
				}
				if len(out) == limit {
					return out, true, nil
				}
				out = append(out, e)
			}
			if len(evs) < q.Limit {
				break
			}
		}
	}
	return out, false, nil
}

// eventSig is what makes two events the same step on both sides: a
// command's argv and exit, a file's op, path and digest, a package's
// name and version, a call's host and outcome.
func eventSig(e store.Event) string {
	switch e.Type {
	case recorder.TypeExec:
		var d recorder.ExecData
		_ = json.Unmarshal(e.Data, &d)
		code := "?"
		if d.ExitCode != nil {
			code = fmt.Sprint(*d.ExitCode)
		}
		return "exec\x00" + strings.Join(d.Argv, "\x00") + "\x00" + code + d.Signal
	case recorder.TypeFile:
		var d recorder.FileData
		_ = json.Unmarshal(e.Data, &d)
		return "file\x00" + d.Op + "\x00" + d.Path + "\x00" + d.OldPath + "\x00" + d.SHA256
	case recorder.TypePackage:
		var d recorder.PackageData
		_ = json.Unmarshal(e.Data, &d)
		return "package\x00" + d.Manager + d.Action + "\x00" + d.Name + "\x00" + d.Version
	}
	var d map[string]any
	_ = json.Unmarshal(e.Data, &d)
	delete(d, "duration_ms")
	b, _ := json.Marshal(d)
	return e.Type + "\x00" + string(b)
}
