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
}

// Summary waits up to wait for session id to exit and describes it.
func (c *Client) Summary(ctx context.Context, id string, wait time.Duration) (Summary, error) {
	r, err := c.exec.Summary(ctx, &agentv1.SummaryRequest{Id: id, WaitMs: uint32(wait / time.Millisecond)})
	if err != nil {
		return Summary{}, c.sessionErr(id, err)
	}
	s := Summary{Exited: r.Exited, Exit: Exit{Code: int(r.ExitCode), Signal: r.Signal},
		Started: time.Unix(0, r.StartedUnixNano), Stdout: streamSummary(r.Stdout), Stderr: streamSummary(r.Stderr)}
	if r.EndedUnixNano != 0 {
		s.Ended = time.Unix(0, r.EndedUnixNano)
	}
	return s, nil
}

func streamSummary(p *agentv1.StreamSummary) StreamSummary {
	if p == nil {
		return StreamSummary{}
	}
	return StreamSummary{Head: p.Head, Tail: p.Tail, TotalBytes: int64(p.TotalBytes), SHA256: p.Sha256}
}
