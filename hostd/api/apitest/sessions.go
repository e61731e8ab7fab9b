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

// AttachFunc is the behaviour of Manager.Attach.
type AttachFunc func(ctx context.Context, id, execID string, offset uint64, emit func(sandbox.ExecEvent) error) error

// SetAttach replaces Attach's behaviour. The default knows session "e1"
// only, and emits the offset and a newline on stdout, then exit 0.
func (f *Manager) SetAttach(fn AttachFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attach = fn
}

// Attach emits session execID's events after its start event.
func (f *Manager) Attach(ctx context.Context, id, execID string, offset uint64, emit func(sandbox.ExecEvent) error) error {
	if err := f.call("Attach"); err != nil {
		return err
	}
	if _, err := f.lookup(id); err != nil {
		return err
	}
	f.mu.Lock()
	fn := f.attach
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, id, execID, offset, emit)
	}
	if execID != "e1" {
		return fmt.Errorf("%w: exec %s", sandbox.ErrNotFound, execID)
	}
	return EmitAll(emit,
		sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte(fmt.Sprintf("%d\n", offset)), Offset: offset},
		sandbox.ExecEvent{Type: sandbox.EventExit},
	)
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
