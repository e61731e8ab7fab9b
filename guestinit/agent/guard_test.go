package agent

import (
	"context"
	"testing"
	"unicode/utf8"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// TestGuardReply: a reply ttrpc could not send (too large, or an error
// message that is not UTF-8) becomes an error it can send, so the
// connection lives on.
func TestGuardReply(t *testing.T) {
	info := &ttrpc.UnaryServerInfo{FullMethod: "/test/Big"}
	big := func(context.Context, func(any) error) (any, error) {
		return &agentv1.ReadChunkResponse{Data: make([]byte, 5<<20)}, nil
	}
	if _, err := guardReply(context.Background(), nil, info, big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 5 MiB reply: %v", err)
	}
	bad := func(context.Context, func(any) error) (any, error) {
		return nil, toStatus(&testPathError{})
	}
	_, err := guardReply(context.Background(), nil, info, bad)
	if st, _ := status.FromError(err); !utf8.ValidString(st.Message()) {
		t.Fatalf("message %q is not UTF-8", st.Message())
	}
	small := func(context.Context, func(any) error) (any, error) { return &agentv1.Empty{}, nil }
	if _, err := guardReply(context.Background(), nil, info, small); err != nil {
		t.Fatal(err)
	}
}

type testPathError struct{}

func (*testPathError) Error() string { return "open /tmp/\xff: no such file" }
