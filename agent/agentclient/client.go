// Package agentclient is the host side of the host ↔ guest protocol: a typed
// client for guestinit's Exec, Files, System, Events and Diff services over
// one agent-channel connection. Guest errors come back with their meaning: file errors as
// *fs.PathError wrapping the guest's syscall.Errno, missing sessions as
// ErrNoSession.
package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Errors of the client.
var (
	// ErrNoSession: the guest has no exec session of that id.
	ErrNoSession = errors.New("agentclient: no such exec session")
	// ErrStart: the guest could not start the command.
	ErrStart = errors.New("agentclient: command could not start")
	// ErrInvalid: the guest refused the request's arguments.
	ErrInvalid = errors.New("agentclient: invalid request")
	// ErrClosed: the connection to the agent is gone.
	ErrClosed = errors.New("agentclient: connection closed")
)

// Client talks to one guest agent.
type Client struct {
	closed atomic.Bool
	conn   *ttrpc.Client
	guard  *guardConn
	// wedged is set when the client closed the connection itself, after a
	// call outlived its timeout.
	wedged atomic.Bool
	// timeout bounds each call, and each wait of a file stream.
	timeout time.Duration
	// dialFiles opens a file stream (WithFileStreams); noStreams is set
	// once the guest refused one.
	dialFiles func(ctx context.Context) (net.Conn, error)
	noStreams atomic.Bool
	exec      agentv1.ExecService
	files     agentv1.FilesService
	sys       agentv1.SystemService
	events    agentv1.EventsService
	diff      agentv1.DiffService
}

// Option configures a Client.
type Option func(*options)

type options struct {
	timeout   time.Duration
	dialFiles func(ctx context.Context) (net.Conn, error)
}

// WithCallTimeout bounds each call to d plus the wait it asks the guest for
// (default CallTimeout).
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// New wraps an open agent-channel connection. Close closes it. Every call
// ends within its timeout (WithCallTimeout), whatever the guest sends.
func New(conn net.Conn, opts ...Option) *Client {
	o := options{timeout: CallTimeout}
	for _, f := range opts {
		f(&o)
	}
	cl := &Client{}
	g := newGuardConn(conn)
	c := ttrpc.NewClient(g, ttrpc.WithUnaryClientInterceptor(deadline(o.timeout, cl)))
	*cl = Client{
		conn:      c,
		guard:     g,
		timeout:   o.timeout,
		dialFiles: o.dialFiles,
		exec:      agentv1.NewExecClient(c),
		files:     agentv1.NewFilesClient(c),
		sys:       agentv1.NewSystemClient(c),
		events:    agentv1.NewEventsClient(c),
		diff:      agentv1.NewDiffClient(c),
	}
	return cl
}

// Close closes the connection.
func (c *Client) Close() error { c.closed.Store(true); return c.conn.Close() }

// Closed reports whether Close was called, by the caller or by the client
// itself after a call outlived its timeout (a connection the guest wedged).
func (c *Client) Closed() bool { return c.closed.Load() }

// Why says why the client closed the connection itself: a reply from the
// guest that broke the protocol's bounds, or a call that outlived its
// timeout. It is nil while the connection is open, and when it ended
// otherwise (Close, or the guest or the channel closing it).
func (c *Client) Why() error {
	if err := c.guard.err(); err != nil {
		return err
	}
	if c.wedged.Load() {
		return errors.New("agentclient: a call outlived its timeout; the guest wedged the connection")
	}
	return nil
}

// Wait blocks until the connection is gone or ctx ends.
func (c *Client) Wait(ctx context.Context) error { return c.conn.UserOnCloseWait(ctx) }

// Health asks the agent how it is.
func (c *Client) Health(ctx context.Context) (*agentv1.HealthResponse, error) {
	r, err := c.sys.Health(ctx, &agentv1.Empty{})
	return r, fromStatus(err)
}

// SetTime sets the guest clock to t.
func (c *Client) SetTime(ctx context.Context, t time.Time) error {
	_, err := c.sys.SetTime(ctx, &agentv1.SetTimeRequest{UnixNano: t.UnixNano()})
	return fromStatus(err)
}

// Reseed mixes entropy into the guest kernel RNG.
func (c *Client) Reseed(ctx context.Context, entropy []byte) error {
	_, err := c.sys.Reseed(ctx, &agentv1.ReseedRequest{Entropy: entropy})
	return fromStatus(err)
}

// SetIdentity gives the guest a new hostname and machine-id.
func (c *Client) SetIdentity(ctx context.Context, hostname, machineID string) error {
	_, err := c.sys.SetIdentity(ctx, &agentv1.SetIdentityRequest{Hostname: hostname, MachineId: machineID})
	return fromStatus(err)
}

// Freeze flushes and freezes the guest's filesystems; Thaw undoes it.
func (c *Client) Freeze(ctx context.Context) error {
	_, err := c.sys.Freeze(ctx, &agentv1.Empty{})
	return fromStatus(err)
}

// Thaw thaws the guest's filesystems.
func (c *Client) Thaw(ctx context.Context) error {
	_, err := c.sys.Thaw(ctx, &agentv1.Empty{})
	return fromStatus(err)
}

// fromStatus turns a ttrpc status error back into a typed error.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ttrpc.ErrClosed) {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if e, ok := d.(*agentv1.ErrnoDetail); ok {
			return &fs.PathError{Op: e.Op, Path: string(e.Path), Err: syscall.Errno(e.Errno)}
		}
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", ErrInvalid, st.Message())
	case codes.Canceled:
		return fmt.Errorf("%s: %w", st.Message(), context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", st.Message(), context.DeadlineExceeded)
	}
	return fmt.Errorf("agent: %s (%s)", st.Message(), st.Code())
}
