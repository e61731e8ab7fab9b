package apitest

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// StartExec records the call and returns exec id "e1".
func (f *Manager) StartExec(ctx context.Context, id string, req sandbox.ExecRequest) (string, error) {
	if err := f.call("StartExec"); err != nil {
		return "", err
	}
	if _, err := f.lookup(id); err != nil {
		return "", err
	}
	return "e1", nil
}

// Attach runs the Exec behaviour for session "e1" and emits its events
// after the start event, from offset on.
func (f *Manager) Attach(ctx context.Context, id, execID string, offset uint64, emit func(sandbox.ExecEvent) error) error {
	if err := f.call("Attach"); err != nil {
		return err
	}
	if execID != "e1" {
		return fmt.Errorf("%w: exec %s", sandbox.ErrNotFound, execID)
	}
	return f.Exec(ctx, id, sandbox.ExecRequest{Cmd: []string{"attach", fmt.Sprint(offset)}}, func(ev sandbox.ExecEvent) error {
		if ev.Type == sandbox.EventStart {
			return nil
		}
		return emit(ev)
	})
}

// Sessions lists one finished session, "e1".
func (f *Manager) Sessions(ctx context.Context, id string) ([]sandbox.Session, error) {
	if err := f.call("Sessions"); err != nil {
		return nil, err
	}
	if _, err := f.lookup(id); err != nil {
		return nil, err
	}
	t := time.Unix(1700000000, 0).UTC()
	return []sandbox.Session{{ID: "e1", Cmd: []string{"true"}, PID: 42, Started: t, Ended: t}}, nil
}

// WriteStdin records the call.
func (f *Manager) WriteStdin(ctx context.Context, id, execID string, data []byte, close bool) error {
	return f.call(fmt.Sprintf("WriteStdin %q %v", data, close))
}

// Resize records the call.
func (f *Manager) Resize(ctx context.Context, id, execID string, rows, cols int) error {
	return f.call(fmt.Sprintf("Resize %dx%d", rows, cols))
}
