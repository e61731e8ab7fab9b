package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"testing"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

func TestStreamSummaryKeepsBothEnds(t *testing.T) {
	for _, size := range []int{0, 10, summaryKeep, summaryKeep + 1, 3*summaryKeep + 17, 10 * summaryKeep} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		s := newStreamSummary()
		for off := 0; off < len(data); off += 5000 {
			s.add(data[off:min(off+5000, len(data))])
		}
		p := s.proto()
		sum := sha256.Sum256(data)
		wantHead := data[:min(size, summaryKeep)]
		wantTail := data[min(size, summaryKeep):]
		if len(wantTail) > summaryKeep {
			wantTail = wantTail[len(wantTail)-summaryKeep:]
		}
		if p.TotalBytes != uint64(size) || p.Sha256 != hex.EncodeToString(sum[:]) || !bytes.Equal(p.Head, wantHead) || !bytes.Equal(p.Tail, wantTail) {
			t.Errorf("size %d: total %d head %d tail %d, want head %d tail %d", size, p.TotalBytes, len(p.Head), len(p.Tail), len(wantHead), len(wantTail))
		}
	}
}

// A session's summary says the event ring's head at its exit, read after
// BeforeExit (so after the watcher's flush), and says nothing while it runs
// or when no ring is set.
func TestSummaryEventsHead(t *testing.T) {
	var head atomic.Uint64
	head.Store(3)
	e := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler),
		BeforeExit(func() { head.Store(7) }), EventsHead(head.Load))
	s, err := e.start(&agentv1.StartRequest{Argv: []string{"sleep", "0.2"}})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := e.Summary(context.Background(), &agentv1.SummaryRequest{Id: s.id})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Exited || sum.EventsHead != nil {
		t.Errorf("running: exited %v, head %v; want no head", sum.Exited, sum.EventsHead)
	}
	sum, err = e.Summary(context.Background(), &agentv1.SummaryRequest{Id: s.id, WaitMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Exited || sum.EventsHead == nil || *sum.EventsHead != 7 {
		t.Errorf("exited: exited %v, head %v; want 7 (read after BeforeExit)", sum.Exited, sum.EventsHead)
	}

	plain := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler))
	s, err = plain.start(&agentv1.StartRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	sum, err = plain.Summary(context.Background(), &agentv1.SummaryRequest{Id: s.id, WaitMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Exited || sum.EventsHead != nil {
		t.Errorf("no ring: exited %v, head %v; want no head", sum.Exited, sum.EventsHead)
	}
}
