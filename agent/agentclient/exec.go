package agentclient

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// pollWait is how long one output Read may wait in the guest.
const pollWait = 5000

// Command is one process to start.
type Command struct {
	// ID, if set, names the session (see agentv1.StartRequest.id): the
	// caller then knows it even when the answer is lost.
	ID    string
	Argv  []string
	Shell string
	Env   map[string]string
	Cwd   string
	// Stdin keeps stdin open for WriteStdin.
	Stdin bool
	// Tty runs the command on a pseudo-terminal of Rows x Cols (0: 24x80).
	Tty        bool
	Rows, Cols uint32
	// User, if set, runs the command as that user ("name", "uid",
	// "name:group", "uid:gid"), resolved by the guest; "" is root.
	User string
	// Forget, with StartWait, has the guest drop the session once it has
	// answered with its exit: the host's own runs (a warm-up) leave none
	// for List to show.
	Forget bool
}

// Output is a piece of a session's output.
type Output struct {
	Stderr bool
	Data   []byte
	Offset uint64
}

// Exit is how a session ended.
type Exit struct {
	Code   int
	Signal string
}

// Start launches cmd and returns its session id.
func (c *Client) Start(ctx context.Context, cmd Command) (string, error) {
	r, err := c.start(ctx, cmd, 0, false)
	if err != nil {
		return "", err
	}
	return r.Id, nil
}

// Started is a session that StartWait launched, with what it had written
// and whether it had exited by the time the guest answered.
type Started struct {
	ID string
	// Output is the session's output from offset 0 up to the answer; Next
	// is where a Follow goes on.
	Output []Output
	Next   uint64
	Exited bool
	Exit   Exit
	// Summary is set when the session had exited and a summary was asked
	// for (and the agent gives one: an older agent waits for nothing).
	Summary *Summary
}

// StartWait launches cmd (which must not keep stdin open, nor run on a
// terminal) and waits up to wait for its exit (or 1 MiB of output), in the
// same call: a short command costs one round trip. With summary, the
// answer holds the session's summary once it has exited.
func (c *Client) StartWait(ctx context.Context, cmd Command, wait time.Duration, summary bool) (Started, error) {
	if cmd.Stdin || cmd.Tty {
		return Started{}, fmt.Errorf("%w: StartWait with stdin or a terminal", ErrStart)
	}
	wait = min(wait, pollWait*time.Millisecond)
	r, err := c.start(withWait(ctx, wait), cmd, wait, summary)
	if err != nil {
		return Started{}, err
	}
	st := Started{ID: r.Id}
	if o := r.Output; o != nil {
		for _, ch := range o.Chunks {
			st.Output = append(st.Output, outputOf(ch))
		}
		st.Next, st.Exited, st.Exit = o.NextOffset, o.Exited, Exit{Code: int(o.ExitCode), Signal: o.Signal}
		if o.Exited && summary && r.Summary != nil && r.Summary.Exited {
			sum := summaryOf(r.Summary)
			st.Summary = &sum
		}
	}
	return st, nil
}

func (c *Client) start(ctx context.Context, cmd Command, wait time.Duration, summary bool) (*agentv1.StartResponse, error) {
	r, err := c.exec.Start(ctx, &agentv1.StartRequest{Id: cmd.ID, Argv: cmd.Argv, Shell: cmd.Shell, Env: cmd.Env, Cwd: cmd.Cwd, Stdin: cmd.Stdin,
		Tty: cmd.Tty, Rows: cmd.Rows, Cols: cmd.Cols, User: cmd.User, WaitMs: uint32(wait / time.Millisecond), Summary: summary, Forget: cmd.Forget})
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unavailable {
			return nil, fmt.Errorf("%w: %s", ErrStart, st.Message())
		}
		return nil, fromStatus(err)
	}
	if err := checkID(r.Id); err != nil {
		return nil, err
	}
	return r, nil
}

// Follow reads session id's output from offset, calling emit for each piece
// in order, until the session exits or ctx ends. It returns the exit. It pulls
// one chunk at a time, so a slow emit slows the guest process, never memory.
func (c *Client) Follow(ctx context.Context, id string, offset uint64, emit func(Output) error) (Exit, error) {
	for {
		r, err := c.exec.Read(withWait(ctx, pollWait*time.Millisecond), &agentv1.ReadOutputRequest{Id: id, Offset: offset, WaitMs: pollWait})
		if err != nil {
			if st, ok := status.FromError(err); ok && st.Code() == codes.NotFound {
				return Exit{}, fmt.Errorf("%w: %s", ErrNoSession, id)
			}
			return Exit{}, fromStatus(err)
		}
		for _, ch := range r.Chunks {
			if err := emit(outputOf(ch)); err != nil {
				return Exit{}, err
			}
		}
		offset = r.NextOffset
		if r.Exited {
			return Exit{Code: int(r.ExitCode), Signal: r.Signal}, nil
		}
		if len(r.Chunks) == 0 {
			// A real agent answers with nothing only after waiting.
			if err := pause(ctx, emptyPause); err != nil {
				return Exit{}, err
			}
		}
		if err := ctx.Err(); err != nil {
			return Exit{}, err
		}
	}
}

// WriteStdin writes data to session id's stdin, closing it if close is set.
func (c *Client) WriteStdin(ctx context.Context, id string, data []byte, close bool) error {
	_, err := c.exec.WriteStdin(ctx, &agentv1.WriteStdinRequest{Id: id, Data: data, Close: close})
	return c.sessionErr(id, err)
}

// Signal sends sig to session id's process group.
func (c *Client) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	_, err := c.exec.Signal(ctx, &agentv1.SignalRequest{Id: id, Signal: int32(sig)})
	return c.sessionErr(id, err)
}

// Sessions lists the guest's exec sessions.
func (c *Client) Sessions(ctx context.Context) ([]*agentv1.Session, error) {
	r, err := c.exec.List(ctx, &agentv1.Empty{})
	if err != nil {
		return nil, fromStatus(err)
	}
	return r.Sessions, nil
}

func (c *Client) sessionErr(id string, err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.NotFound && len(st.Details()) == 0 {
		return fmt.Errorf("%w: %s", ErrNoSession, id)
	}
	return fromStatus(err)
}

// Resize sets a PTY session's terminal size.
func (c *Client) Resize(ctx context.Context, id string, rows, cols uint32) error {
	_, err := c.exec.Resize(ctx, &agentv1.ResizeRequest{Id: id, Rows: rows, Cols: cols})
	return c.sessionErr(id, err)
}

func outputOf(ch *agentv1.OutputChunk) Output {
	return Output{Stderr: ch.Kind == agentv1.OutputKind_OUTPUT_KIND_STDERR, Data: ch.Data, Offset: ch.Offset}
}
