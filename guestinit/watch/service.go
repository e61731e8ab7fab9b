package watch

import (
	"context"
	"fmt"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Service is the Events ttrpc service over a Ring.
type Service struct {
	ring     *Ring
	watchErr string
}

var _ agentv1.EventsService = (*Service)(nil)

// NewService serves ring. watchErr, when not empty, says why file events
// are not captured; it is returned with every batch.
func NewService(ring *Ring, watchErr string) *Service {
	return &Service{ring: ring, watchErr: watchErr}
}

// Next returns the events above req.After (see the proto).
func (s *Service) Next(ctx context.Context, req *agentv1.NextEventsRequest) (*agentv1.NextEventsResponse, error) {
	b := s.ring.Next(ctx, req.After, time.Duration(req.WaitMs)*time.Millisecond, int(req.Max))
	werr := s.watchErr
	if n := s.ring.Overflows(); n > 0 && werr == "" {
		// The host records each new value once: the count says how often.
		werr = fmt.Sprintf("the kernel's fanotify queue overflowed %d times; some file events were lost", n)
	}
	return &agentv1.NextEventsResponse{Events: b.Events, Head: b.Head, Lost: b.Lost, WatchError: werr}, nil
}
