package watch

import (
	"context"
	"strings"
	"testing"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

func TestServiceReportsQueueOverflows(t *testing.T) {
	r := NewRing(4)
	s := NewService(r, "")
	ctx := context.Background()
	if resp, _ := s.Next(ctx, &agentv1.NextEventsRequest{}); resp.WatchError != "" {
		t.Fatalf("watch error before any overflow: %q", resp.WatchError)
	}
	r.Overflowed()
	r.Overflowed()
	resp, _ := s.Next(ctx, &agentv1.NextEventsRequest{})
	if !strings.Contains(resp.WatchError, "overflowed 2 times") {
		t.Errorf("after two overflows: %q", resp.WatchError)
	}
}
