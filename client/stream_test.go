package client_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// TestExecStreamBoundedMemory streams 100 MiB of output (32 MiB under the
// race detector) through the real handler and client and checks that
// neither side holds it in memory.
func TestExecStreamBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 100 MiB")
	}
	const chunk = 64 << 10
	total, limit := 100<<20, uint64(32<<20)
	if raceEnabled {
		total, limit = 32<<20, 16<<20
	}
	ctx := context.Background()
	c, m, _ := newTestClient(t)
	sb, _ := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"}); err != nil {
			return err
		}
		buf := make([]byte, chunk)
		for range total / chunk {
			if err := emit(sandbox.ExecEvent{Type: sandbox.EventStdout, Data: buf}); err != nil {
				return err
			}
		}
		return emit(sandbox.ExecEvent{Type: sandbox.EventExit})
	})

	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	var got int64
	err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"yes"}}, func(ev client.Event) error {
		got += int64(len(ev.Data))
		return nil
	})
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got != int64(total) {
		t.Errorf("streamed: got %d bytes, want %d", got, total)
	}
	if p := peak.Load(); p > limit {
		t.Errorf("peak heap in use: got %d MiB, want under %d MiB", p>>20, limit>>20)
	}
	t.Logf("peak heap in use while streaming %d MiB: %d MiB", total>>20, peak.Load()>>20)
}
