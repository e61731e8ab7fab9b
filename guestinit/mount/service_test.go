package mount

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// hostConn stands for a host connection; call's fn is the test's own.
type hostConn struct{ agentv1.MountsService }

// A signal while the op waits for a host connection ends it with EINTR
// (the caller retries); a signal once it is sent does not cut it short:
// the op returns what the host did.
func TestCallInterrupt(t *testing.T) {
	s := NewService(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := s.call(ctx, func(context.Context, agentv1.MountsService) (int32, error) {
		t.Error("sent with no connection")
		return 0, nil
	}); got != unix.EINTR {
		t.Errorf("interrupted while waiting for a connection: %v, want EINTR", got)
	}

	s.swap(hostConn{}, nil)
	ctx, cancel = context.WithCancel(context.Background())
	inFlight := make(chan struct{})
	go func() {
		<-inFlight
		cancel() // FUSE_INTERRUPT while the host works
	}()
	got := s.call(ctx, func(sent context.Context, _ agentv1.MountsService) (int32, error) {
		close(inFlight)
		<-ctx.Done()
		select {
		case <-sent.Done():
			t.Error("the interrupt cancelled the call in flight")
		case <-time.After(50 * time.Millisecond):
		}
		return int32(unix.EEXIST), nil
	})
	if got != unix.EEXIST {
		t.Errorf("interrupted in flight: %v, want the host's EEXIST", got)
	}
}
