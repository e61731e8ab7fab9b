package sandbox

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// Session describes one exec session of a sandbox: a command started by
// Exec or StartExec, running or finished, whose output the guest keeps.
type Session struct {
	ID      string
	Cmd     []string
	PID     int
	Running bool
	// ExitCode (-1 when killed by a signal) and Signal are set once exited.
	ExitCode int
	Signal   string
	Tty      bool
	Started  time.Time
	// Ended is zero while the session runs.
	Ended time.Time
}

// StartExec starts req in sandbox id and returns its session id at once
// (a background command). Its stdin, if given, is written (and, without a
// terminal, closed). Read its output with Attach.
func (x *Execs) StartExec(ctx context.Context, id string, req ExecRequest) (string, error) {
	b, err := x.boxes.running(ctx, id)
	if err != nil {
		return "", err
	}
	_, st, err := x.start(ctx, b, req, false)
	return st.ID, err
}

// Attach emits session execID's output from offset (a position in its
// combined output log, as carried by ExecEvent.Offset), then its exit, like
// Exec after its start event. A running session is followed until it exits;
// a finished one is read to its end. Output the guest no longer holds (it
// keeps the last 4 MiB) is skipped; the first event's Offset shows where
// reading resumed.
func (x *Execs) Attach(ctx context.Context, id, execID string, offset uint64, emit func(ExecEvent) error) error {
	b, err := x.boxes.running(ctx, id)
	if err != nil {
		return err
	}
	ctx, cancel := b.bind(ctx)
	defer cancel()
	c, err := b.client(ctx)
	if err != nil {
		return b.streamErr(err)
	}
	return x.follow(ctx, b, c, execID, offset, emit)
}

// Sessions lists sandbox id's exec sessions, oldest first.
func (x *Execs) Sessions(ctx context.Context, id string) ([]Session, error) {
	var out []Session
	err := x.onSession(ctx, id, "", func(c *agentclient.Client) error {
		list, err := c.Sessions(ctx)
		for _, s := range list {
			ss := Session{ID: s.Id, Cmd: s.Argv, PID: int(s.Pid), Running: s.Running, ExitCode: int(s.ExitCode),
				Signal: s.Signal, Tty: s.Tty, Started: time.Unix(0, s.StartedUnixNano).UTC()}
			if s.EndedUnixNano != 0 {
				ss.Ended = time.Unix(0, s.EndedUnixNano).UTC()
			}
			out = append(out, ss)
		}
		return err
	})
	return out, err
}

// WriteStdin writes data to a session's stdin and closes it if close is
// set (on a terminal, close sends end-of-file, ^D).
func (x *Execs) WriteStdin(ctx context.Context, id, execID string, data []byte, close bool) error {
	return x.onSession(ctx, id, execID, func(c *agentclient.Client) error {
		return c.WriteStdin(ctx, execID, data, close)
	})
}

// Resize sets a terminal session's window size.
func (x *Execs) Resize(ctx context.Context, id, execID string, rows, cols int) error {
	if rows < 1 || cols < 1 || rows > 0xffff || cols > 0xffff {
		return ErrInvalid
	}
	return x.onSession(ctx, id, execID, func(c *agentclient.Client) error {
		return c.Resize(ctx, execID, uint32(rows), uint32(cols))
	})
}
