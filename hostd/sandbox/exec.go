package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"syscall"

	"github.com/agentbox/agentbox/hostd/agentclient"
)

// Exec runs req in sandbox id and calls emit for each event in order: start,
// output as it is produced, exit. It returns nil after the exit event, or the
// error that ended the stream: ErrDeleted if the sandbox was deleted, or
// ErrNotRunning if its VM died. A slow emit slows the command, not memory.
func (m *Manager) Exec(ctx context.Context, id string, req ExecRequest, emit func(ExecEvent) error) error {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return fmt.Errorf("%w: cmd is empty", ErrInvalid)
	}
	if req.Cwd != "" {
		if err := CheckPath(req.Cwd); err != nil {
			return err
		}
	}
	b, err := m.live(ctx, id)
	if err != nil {
		return err
	}
	rec, err := m.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	env := maps.Clone(rec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, req.Env)
	// The stream ends when the caller goes or the sandbox does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-b.gone:
			cancel()
		case <-ctx.Done():
		}
	}()

	c, err := m.agent(ctx, b)
	if err != nil {
		return m.streamErr(b, err)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = b.cwd
	}
	execID, err := c.Start(ctx, agentclient.Command{Argv: req.Cmd, Env: env, Cwd: cwd, Stdin: req.Stdin != nil})
	if err != nil {
		if errors.Is(err, agentclient.ErrStart) {
			return fmt.Errorf("%w: %v", ErrExecStart, err)
		}
		return m.streamErr(b, err)
	}
	if err := emit(ExecEvent{Type: EventStart, ExecID: execID}); err != nil {
		return err
	}
	if req.Stdin != nil {
		if err := c.WriteStdin(ctx, execID, req.Stdin, true); err != nil {
			return m.streamErr(b, err)
		}
	}
	exit, err := c.Follow(ctx, execID, 0, func(o agentclient.Output) error {
		t := EventStdout
		if o.Stderr {
			t = EventStderr
		}
		return emit(ExecEvent{Type: t, Data: o.Data})
	})
	if err != nil {
		return m.streamErr(b, err)
	}
	return emit(ExecEvent{Type: EventExit, ExitCode: exit.Code, Signal: exit.Signal})
}

// streamErr explains an error that ended a call on a live sandbox.
func (m *Manager) streamErr(b *box, err error) error {
	select {
	case <-b.gone:
		return fmt.Errorf("%w (%v)", b.why, err)
	default:
	}
	select {
	case <-b.vm.Done():
		return fmt.Errorf("%w: vm exited", ErrNotRunning)
	default:
	}
	return err
}

// Signal sends sig to a running command's process group.
func (m *Manager) Signal(ctx context.Context, id, execID string, sig syscall.Signal) error {
	b, err := m.live(ctx, id)
	if err != nil {
		return err
	}
	c, err := m.agent(ctx, b)
	if err != nil {
		return m.streamErr(b, err)
	}
	if err := c.Signal(ctx, execID, sig); err != nil {
		if errors.Is(err, agentclient.ErrNoSession) {
			return fmt.Errorf("%w: exec %s", ErrNotFound, execID)
		}
		return m.streamErr(b, err)
	}
	return nil
}
