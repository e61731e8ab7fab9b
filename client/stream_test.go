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

// TestExecStreamBoundedMemory streams 100 MiB of output (24 MiB under the
// race detector) through the real handler and client and checks that
// neither side holds it in memory: the heap's growth over a collected
// baseline stays under half the stream, which a buffering side would exceed.
// The bound is relative so that what else the test binary holds, and when the
// collector runs, do not decide the result.
func TestExecStreamBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 100 MiB")
	}
	const chunk = 64 << 10
	total := 100 << 20
	if raceEnabled {
		total = 24 << 20
	}
	limit := uint64(total / 2)
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

	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	peak.Store(base.HeapInuse)
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
	grew := peak.Load() - base.HeapInuse
	if grew > limit {
		t.Errorf("heap in use grew by %d MiB while streaming %d MiB, want under %d MiB", grew>>20, total>>20, limit>>20)
	}
	t.Logf("heap in use: %d MiB before, peak %d MiB while streaming %d MiB", base.HeapInuse>>20, peak.Load()>>20, total>>20)
}
