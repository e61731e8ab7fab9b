package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
type Execs struct {
	boxes    boxFinder
	rec      *recorderFeed
	timeouts *execTimeouts
	metrics  Observer
}

// Exec runs req in sandbox id and calls emit for each event in order: start,
// output as it is produced, exit. It returns nil after the exit event, or the
// error that ended the stream: ErrDeleted if the sandbox was deleted, or
// ErrNotRunning if its VM died. A slow emit slows the command, not memory.
// The command outlives a cancelled ctx; Attach reads on from any offset.
func (x *Execs) Exec(ctx context.Context, id string, req ExecRequest, emit func(ExecEvent) error) error {
	b, err := x.boxes.running(ctx, id)
	if err != nil {
		return err
	}
	b.execs.Add(1)
	defer b.execs.Add(-1)
	defer x.metrics.Since("exec", time.Now())
	ctx, cancel := b.bind(ctx)
	defer cancel()
	c, st, err := x.start(ctx, b, req, req.Collect && req.Stdin == nil && !req.Tty)
	if err != nil {
		return err
	}
	if err := emit(ExecEvent{Type: EventStart, ExecID: st.ID}); err != nil {
		return err
	}
	for _, o := range st.Output {
		if err := emit(outputEvent(o)); err != nil {
			return err
		}
	}
	if st.Exited {
		return x.exited(ctx, b, st.ID, st.Exit, emit)
	}
	return x.follow(ctx, b, c, st.ID, st.Next, emit)
}

// start launches req in the guest and feeds it its stdin, if any. With
// wait (no stdin, no terminal), the guest answers with the output up to the
// exit (or 1 MiB of it), and the exit's summary for the flight recorder.
func (x *Execs) start(ctx context.Context, b *runningVM, req ExecRequest, wait bool) (*agentclient.Client, agentclient.Started, error) {
	var none agentclient.Started
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return nil, none, fmt.Errorf("%w: cmd is empty", ErrInvalid)
	}
	if req.Cwd != "" {
		if err := CheckPath(req.Cwd); err != nil {
			return nil, none, err
		}
	}
	if err := CheckUser(req.User); err != nil {
		return nil, none, err
	}
	if req.Rows < 0 || req.Cols < 0 || req.Rows > 0xffff || req.Cols > 0xffff {
		return nil, none, fmt.Errorf("%w: bad terminal size %dx%d", ErrInvalid, req.Rows, req.Cols)
	}
	env := maps.Clone(b.env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, req.Env)
	c, err := b.client(ctx)
	if err != nil {
		return nil, none, b.streamErr(err)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = b.cwd
	}
	user := req.User
	if user == "" {
		user = b.user
	}
	cmd := agentclient.Command{ID: newExecID(), Argv: req.Cmd, Env: env, Cwd: cwd, Stdin: req.Stdin != nil,
		Tty: req.Tty, Rows: uint32(req.Rows), Cols: uint32(req.Cols), User: user}
	timeoutS := req.TimeoutS
	if timeoutS == 0 {
		timeoutS = b.limits.ExecTimeoutS
	}
	st, err := x.launch(ctx, b, c, cmd, timeoutS, wait)
	if err != nil {
		return nil, none, err
	}
	if req.Stdin != nil {
		// A terminal's stdin stays open: closing it would send EOF (^D).
		if err := c.WriteStdin(ctx, st.ID, req.Stdin, !req.Tty); err != nil {
			return nil, none, b.streamErr(err)
		}
	}
	return c, st, nil
}

// launch starts cmd (with wait, and waits for its output up to the exit in
// the same call) and records it: its start in the flight recorder, before
// the guest is asked, its end too when the guest answered with it, and its
// timeout, counted from the call. A start whose answer was lost (the
// channel closed, ctx ended) is followed all the same, under the id the
// host chose: the command may run.
func (x *Execs) launch(ctx context.Context, b *runningVM, c *agentclient.Client, cmd agentclient.Command, timeoutS int, wait bool) (agentclient.Started, error) {
	timeout := time.Duration(timeoutS) * time.Second
	began := time.Now()
	t := x.rec.execStarted(ctx, b, execStart{argv: cmd.Argv, cwd: cmd.Cwd, env: cmd.Env, tty: cmd.Tty, id: cmd.ID, timeoutS: timeoutS})
	var st agentclient.Started
	var err error
	if wait {
		w := startWait
		if timeout > 0 {
			w = min(w, timeout)
		}
		st, err = c.StartWait(ctx, cmd, w, x.rec.on())
	} else {
		st.ID, err = c.Start(ctx, cmd)
	}
	rctx := ctx
	if err != nil {
		st, rctx = agentclient.Started{ID: cmd.ID}, context.WithoutCancel(ctx)
	}
	x.rec.startDone(rctx, b, cmd.ID, t, st, err)
	if errors.Is(err, agentclient.ErrStart) {
		return st, fmt.Errorf("%w: %v", ErrExecStart, err)
	}
	if err == nil {
		fault.Point("exec:started")
	}
	if !st.Exited && timeout > 0 {
		x.timeouts.arm(b.id, st.ID, max(timeout-time.Since(began), time.Millisecond))
	}
	if err != nil {
		return st, b.streamErr(err)
	}
	return st, nil
}

// newExecID is a new exec session id (the host's choice, see launch).
func newExecID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// follow emits session execID's output from offset, then its exit.
func (x *Execs) follow(ctx context.Context, b *runningVM, c *agentclient.Client, execID string, offset uint64, emit func(ExecEvent) error) error {
	exit, err := c.Follow(ctx, execID, offset, func(o agentclient.Output) error { return emit(outputEvent(o)) })
	if errors.Is(err, agentclient.ErrNoSession) {
		return fmt.Errorf("%w: exec %s", ErrNotFound, execID)
	}
	if err != nil {
		return b.streamErr(err)
	}
	return x.exited(ctx, b, execID, exit, emit)
}

// exited emits session execID's exit once the flight recorder holds its end.
func (x *Execs) exited(ctx context.Context, b *runningVM, execID string, exit agentclient.Exit, emit func(ExecEvent) error) error {
	x.rec.waitEnd(ctx, b.id, execID)
	return emit(ExecEvent{Type: EventExit, ExitCode: exit.Code, Signal: exit.Signal})
}

// startWait is how long a collected exec's start waits in the guest for
// the exit (Follow goes on after it).
const startWait = 5 * time.Second

func outputEvent(o agentclient.Output) ExecEvent {
	t := EventStdout
	if o.Stderr {
		t = EventStderr
	}
	return ExecEvent{Type: t, Data: o.Data, Offset: o.Offset}
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
	b, err := x.boxes.live(ctx, id)
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
