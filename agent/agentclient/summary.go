package agentclient

import (
	"context"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// StreamSummary describes one output stream of a session.
type StreamSummary struct {
	Head, Tail []byte
	TotalBytes int64
	SHA256     string
}

// Summary describes a session: its exit (once Exited) and both streams.
type Summary struct {
	Exited         bool
	Exit           Exit
	Started, Ended time.Time
	Stdout, Stderr StreamSummary
	// EventsHead is the guest event ring's head at the exit, after the
	// command's file events were flushed (HasEventsHead: the guest said).
	EventsHead    uint64
	HasEventsHead bool
}

// Summary waits up to wait for session id to exit and describes it.
func (c *Client) Summary(ctx context.Context, id string, wait time.Duration) (Summary, error) {
	r, err := c.exec.Summary(withWait(ctx, wait), &agentv1.SummaryRequest{Id: id, WaitMs: uint32(wait / time.Millisecond)})
	if err != nil {
		return Summary{}, c.sessionErr(id, err)
	}
	return summaryOf(r), nil
}

// summaryOf converts (and bounds) the guest's summary.
func summaryOf(r *agentv1.SessionSummary) Summary {
	s := Summary{Exited: r.Exited, Exit: Exit{Code: int(r.ExitCode), Signal: r.Signal},
		Started: time.Unix(0, r.StartedUnixNano), Stdout: streamSummary(r.Stdout), Stderr: streamSummary(r.Stderr)}
	if r.EndedUnixNano != 0 {
		s.Ended = time.Unix(0, r.EndedUnixNano)
	}
	if r.EventsHead != nil && r.Exited {
		s.EventsHead, s.HasEventsHead = *r.EventsHead, true
	}
	return s
}

func streamSummary(p *agentv1.StreamSummary) StreamSummary {
	if p == nil {
		return StreamSummary{}
	}
	// The guest keeps 64 KiB of each end; a hash is 64 hex digits.
	return StreamSummary{Head: clip(p.Head, maxSummaryBytes), Tail: clipTail(p.Tail, maxSummaryBytes),
		TotalBytes: int64(min(p.TotalBytes, 1<<62)), SHA256: string(clip([]byte(p.Sha256), 64))}
}

// clip returns at most n bytes of b, copied when cut, so that the rest of
// the guest's reply is not kept alive by them.
func clip(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return append([]byte(nil), b[:n]...)
}

// clipTail returns at most the last n bytes of b, copied when cut.
func clipTail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return append([]byte(nil), b[len(b)-n:]...)
}
