package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/internal/fault"
)

// Execs runs commands in the manager's sandboxes: collected, streamed and
// background exec sessions, their stdin, signals, terminals and timeouts.
type Execs struct{ m *Manager }

// Exec runs req in sandbox id and calls emit for each event in order: start,
// output as it is produced, exit. It returns nil after the exit event, or the
// error that ended the stream: ErrDeleted if the sandbox was deleted, or
// ErrNotRunning if its VM died. A slow emit slows the command, not memory.
// The command outlives a cancelled ctx; Attach reads on from any offset.
func (x *Execs) Exec(ctx context.Context, id string, req ExecRequest, emit func(ExecEvent) error) error {
	b, err := x.m.running(ctx, id)
	if err != nil {
		return err
	}
	b.execs.Add(1)
	defer b.execs.Add(-1)
	defer x.m.opts.Metrics.Since("exec", time.Now())
	ctx, cancel := b.bind(ctx)
	defer cancel()
	c, execID, err := x.start(ctx, b, req)
	if err != nil {
		return err
	}
	if err := emit(ExecEvent{Type: EventStart, ExecID: execID}); err != nil {
		return err
	}
	return x.follow(ctx, b, c, execID, 0, emit)
}

// start launches req in the guest and feeds it its stdin, if any.
func (x *Execs) start(ctx context.Context, b *box, req ExecRequest) (*agentclient.Client, string, error) {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return nil, "", fmt.Errorf("%w: cmd is empty", ErrInvalid)
	}
	if req.Cwd != "" {
		if err := CheckPath(req.Cwd); err != nil {
			return nil, "", err
		}
	}
	if err := CheckUser(req.User); err != nil {
		return nil, "", err
	}
	if req.Rows < 0 || req.Cols < 0 || req.Rows > 0xffff || req.Cols > 0xffff {
		return nil, "", fmt.Errorf("%w: bad terminal size %dx%d", ErrInvalid, req.Rows, req.Cols)
	}
	rec, err := x.m.opts.Store.GetSandbox(ctx, b.id)
	if err != nil {
		return nil, "", err
	}
	env := maps.Clone(rec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, req.Env)
	c, err := b.client(ctx)
	if err != nil {
		return nil, "", b.streamErr(err)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = b.cwd
	}
	user := req.User
	if user == "" {
		user = b.user
	}
	execID, err := c.Start(ctx, agentclient.Command{Argv: req.Cmd, Env: env, Cwd: cwd, Stdin: req.Stdin != nil,
		Tty: req.Tty, Rows: uint32(req.Rows), Cols: uint32(req.Cols), User: user})
	if err != nil {
		if errors.Is(err, agentclient.ErrStart) {
			return nil, "", fmt.Errorf("%w: %v", ErrExecStart, err)
		}
		return nil, "", b.streamErr(err)
	}
	fault.Point("exec:started")
	timeoutS := req.TimeoutS
	if timeoutS == 0 {
		timeoutS = b.limits.ExecTimeoutS
	}
	x.m.rec.execStarted(ctx, b, execStart{argv: req.Cmd, cwd: cwd, env: env, tty: req.Tty, id: execID, timeoutS: timeoutS})
	x.m.timeouts.arm(b.id, execID, time.Duration(timeoutS)*time.Second)
	if req.Stdin != nil {
		// A terminal's stdin stays open: closing it would send EOF (^D).
		if err := c.WriteStdin(ctx, execID, req.Stdin, !req.Tty); err != nil {
			return nil, "", b.streamErr(err)
		}
	}
	return c, execID, nil
}

// follow emits session execID's output from offset, then its exit.
func (x *Execs) follow(ctx context.Context, b *box, c *agentclient.Client, execID string, offset uint64, emit func(ExecEvent) error) error {
	exit, err := c.Follow(ctx, execID, offset, func(o agentclient.Output) error {
		t := EventStdout
		if o.Stderr {
			t = EventStderr
		}
		return emit(ExecEvent{Type: t, Data: o.Data, Offset: o.Offset})
	})
	if errors.Is(err, agentclient.ErrNoSession) {
		return fmt.Errorf("%w: exec %s", ErrNotFound, execID)
	}
	if err != nil {
		return b.streamErr(err)
	}
	x.m.rec.waitEnd(ctx, b.id, execID)
	return emit(ExecEvent{Type: EventExit, ExitCode: exit.Code, Signal: exit.Signal})
}

// Signal sends sig to a running command's process group.
func (x *Execs) Signal(ctx context.Context, id, execID string, sig syscall.Signal) error {
	return x.onSession(ctx, id, execID, func(c *agentclient.Client) error {
		return c.Signal(ctx, execID, sig)
	})
}

// onSession calls fn with sandbox id's agent and maps a missing session to
// ErrNotFound.
func (x *Execs) onSession(ctx context.Context, id, execID string, fn func(*agentclient.Client) error) error {
	b, err := x.m.live(ctx, id)
	if err != nil {
		return err
	}
	c, err := b.client(ctx)
	if err != nil {
		return b.streamErr(err)
	}
	if err := fn(c); err != nil {
		if errors.Is(err, agentclient.ErrNoSession) {
			return fmt.Errorf("%w: exec %s", ErrNotFound, execID)
		}
		if errors.Is(err, agentclient.ErrInvalid) {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return b.streamErr(err)
	}
	return nil
}
