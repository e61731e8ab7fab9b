package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// summaryKeep is how many bytes of each end of a stream a summary keeps.
const summaryKeep = 64 << 10

// maxSummaryWait bounds one Summary call's wait.
const maxSummaryWait = 60 * time.Second

// streamSummary follows one output stream as it goes by: its first and
// last summaryKeep bytes, its length and its sha256. The log itself keeps
// only the newest output; the flight recorder needs both ends of it.
type streamSummary struct {
	head  []byte
	tail  []byte // ring of the bytes after head, newest last after fold
	total uint64
	sum   hash.Hash
}

func newStreamSummary() *streamSummary { return &streamSummary{sum: sha256.New()} }

func (s *streamSummary) add(p []byte) {
	s.total += uint64(len(p))
	s.sum.Write(p)
	if n := min(summaryKeep-len(s.head), len(p)); n > 0 {
		s.head = append(s.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	s.tail = append(s.tail, p...)
	if len(s.tail) > 2*summaryKeep {
		s.tail = append(s.tail[:0:0], s.tail[len(s.tail)-summaryKeep:]...)
	}
}

func (s *streamSummary) proto() *agentv1.StreamSummary {
	tail := s.tail
	if len(tail) > summaryKeep {
		tail = tail[len(tail)-summaryKeep:]
	}
	return &agentv1.StreamSummary{
		Head: append([]byte(nil), s.head...), Tail: append([]byte(nil), tail...),
		TotalBytes: s.total, Sha256: hex.EncodeToString(s.sum.Sum(nil)),
	}
}

// summaries returns the stdout and stderr summaries of the log.
func (l *outputLog) summaries() (stdout, stderr *agentv1.StreamSummary) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.summary(agentv1.OutputKind_OUTPUT_KIND_STDOUT).proto(), l.summary(agentv1.OutputKind_OUTPUT_KIND_STDERR).proto()
}

// summary returns kind's summary, creating it. Call with mu held.
func (l *outputLog) summary(kind agentv1.OutputKind) *streamSummary {
	if l.sums == nil {
		l.sums = map[agentv1.OutputKind]*streamSummary{}
	}
	s := l.sums[kind]
	if s == nil {
		s = newStreamSummary()
		l.sums[kind] = s
	}
	return s
}

// Summary waits for a session to exit (up to wait_ms) and describes it.
func (e *Exec) Summary(ctx context.Context, req *agentv1.SummaryRequest) (*agentv1.SessionSummary, error) {
	s, err := e.get(req.Id)
	if err != nil {
		return nil, toStatus(err)
	}
	if wait := min(time.Duration(req.WaitMs)*time.Millisecond, maxSummaryWait); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return s.summary(), nil
}

// summary describes s as it is now.
func (s *session) summary() *agentv1.SessionSummary {
	resp := &agentv1.SessionSummary{StartedUnixNano: s.started.UnixNano()}
	s.mu.Lock()
	if !s.ended.IsZero() {
		resp.Exited, resp.ExitCode, resp.Signal = true, int32(s.status.Code), signalName(s.status.Signal)
		resp.EndedUnixNano = s.ended.UnixNano()
		if s.hasHead {
			head := s.eventsHead
			resp.EventsHead = &head
		}
	}
	s.mu.Unlock()
	resp.Stdout, resp.Stderr = s.out.summaries()
	return resp
}
