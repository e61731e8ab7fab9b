package agentclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/ttrpc"
)

// Everything the guest sends is untrusted: root in the guest can replace
// the agent. ttrpc bounds one reply to 4 MiB; the bounds here keep what the
// host keeps of a reply to what a real agent would send, and every call
// ends within CallTimeout (plus the wait it asked the guest for).
const (
	// CallTimeout bounds a call that asks the guest to wait for nothing.
	CallTimeout = 2 * time.Minute
	// MaxName and MaxPath bound a file name and path (NAME_MAX, PATH_MAX).
	MaxName = 255
	MaxPath = 4096
	// MaxID bounds an exec session or file handle id from the guest.
	MaxID = 128
	// MaxListBytes bounds the names and paths List gathers from one
	// directory, over all its pages.
	MaxListBytes = 32 << 20
	// maxEventField bounds a guest event's short fields (op, names,
	// versions, hashes).
	maxEventField = 512
	// maxSummaryBytes bounds a summary's head or tail (the guest keeps 64 KiB).
	maxSummaryBytes = 64 << 10
	// emptyPause is how long Follow and Read pause after a reply that
	// carried nothing (a real agent waits for output before it answers so),
	// so a guest answering at once with nothing cannot spin the host.
	emptyPause = 100 * time.Millisecond
	// maxEmptyChunks is how many empty non-final file chunks in a row end a
	// read (a real agent sends none).
	maxEmptyChunks = 16
)

// ErrBadReply: the agent's reply is outside what a real agent sends.
var ErrBadReply = errors.New("agentclient: bad reply from the agent")

func badReply(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadReply, fmt.Sprintf(format, args...))
}

// waitKey carries, in a call's ctx, how long the call asks the guest to wait.
type waitKey struct{}

// withWait marks ctx's call as one that asks the guest to wait up to d.
func withWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, waitKey{}, d)
}

// deadline is the client's interceptor: every unary call ends within
// CallTimeout plus the wait it asked for, whatever the guest does. A call
// that outlives that (its caller still waiting) means the guest wedged the
// connection: the client closes it, so the caller's next call redials.
func deadline(timeout time.Duration, c *Client) ttrpc.UnaryClientInterceptor {
	return func(ctx context.Context, req *ttrpc.Request, resp *ttrpc.Response, _ *ttrpc.UnaryClientInfo, invoke ttrpc.Invoker) error {
		d := timeout
		if w, ok := ctx.Value(waitKey{}).(time.Duration); ok && w > 0 {
			d += w
		}
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		err := invoke(cctx, req, resp)
		if err != nil && cctx.Err() != nil && ctx.Err() == nil {
			c.wedged.Store(true)
			c.Close()
		}
		return err
	}
}

// checkID checks a session or handle id from the guest.
func checkID(id string) error {
	if id == "" || len(id) > MaxID {
		return badReply("id of %d bytes", len(id))
	}
	return nil
}

// checkInfo checks a file description from the guest.
func checkInfo(i FileInfo) error {
	if len(i.Name) > MaxName || len(i.Path) > MaxPath {
		return badReply("file name of %d bytes, path of %d", len(i.Name), len(i.Path))
	}
	return nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
