package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/sandbox/sandboxtest"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/waitfor"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

const hostileKey = "ab_hostile-test-key"

// heapBudget is what the heap may grow by while a guest abuses hostd with
// one call at a time: what hostd's limits let one call hold (a listing's
// names twice, as proto bytes and as strings: agentclient.MaxListBytes;
// the API's budget of collected output, 64 MiB), and 64 MiB for frame
// buffers and streams in flight, hostd's and the in-process guest's own.
const heapBudget = 2*agentclient.MaxListBytes + 64<<20 + 64<<20

// hostileEnv is a real manager (fake driver, SQLite, the flight recorder)
// behind the real HTTP API on a loopback listener.
type hostileEnv struct {
	d *vmmtest.FakeDriver
	c *client.Client
}

func newHostileEnv(t *testing.T) *hostileEnv {
	t.Helper()
	var rec *recorder.Recorder
	e := sandboxtest.New(t, func(o *sandbox.Options) {
		rec = recorder.New(recorder.Options{Store: o.Store.(*store.Store), Logger: o.Logger})
		o.Recorder = rec
	})
	log := e.Opts.Logger
	srv := httptest.NewServer(api.New(api.Options{Manager: e.M.Service(), Auth: auth.New(apitest.NewKeys(auth.Hash(hostileKey))),
		Health: func() api.HealthInfo { return api.HealthInfo{VMM: "fake"} }, Logger: log, Events: rec}))
	t.Cleanup(func() {
		srv.Close()
		e.M.Close(context.Background())
	})
	c, err := client.New(srv.URL, hostileKey)
	if err != nil {
		t.Fatal(err)
	}
	return &hostileEnv{d: e.D, c: c}
}

func (h *hostileEnv) create(t *testing.T) (client.Sandbox, *vmmtest.FakeVM) {
	t.Helper()
	sb, err := h.c.CreateSandbox(context.Background(), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return sb, h.d.Last()
}

// echo runs echo in sandbox id through the API and checks its output.
func (h *hostileEnv) echo(ctx context.Context, id string) error {
	r, err := h.c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"echo", "ok"}})
	if err != nil {
		return err
	}
	if r.Stdout != "ok\n" || r.ExitCode != 0 {
		return fmt.Errorf("echo answered %+v", r)
	}
	return nil
}

// heapSampler records the largest live heap while it runs: it collects
// garbage before each sample, so what it sees is what hostd (and the
// in-process guest) holds, not what the collector has yet to free.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	wg   sync.WaitGroup
}

func sampleHeap() *heapSampler {
	s := &heapSampler{stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if h := heapAfterGC(); h > s.peak.Load() {
				s.peak.Store(h)
				if p := os.Getenv("HOSTILE_PEAK_PROFILE"); p != "" { // to see what the peak holds

					if f, err := os.Create(p); err == nil {
						_ = pprof.Lookup("heap").WriteTo(f, 0)
						f.Close()
					}
				}
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *heapSampler) end() uint64 { close(s.stop); s.wg.Wait(); return s.peak.Load() }

// heapAfterGC collects garbage and returns the live heap that collection
// marked (not HeapAlloc, which also counts what other goroutines allocated
// since: at an endless stream's rate, tens of MiB).
func heapAfterGC() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// closeIdle closes the test client's idle connections (and so the server's
// goroutines that serve them).
func closeIdle() { http.DefaultTransport.(*http.Transport).CloseIdleConnections() }

// endless is how much of an endless stream the test reads (less under the
// race detector, race_test.go).
var endless = map[bool]int{false: 128 << 20, true: 8 << 20}[raceEnabled]

// errStop ends a stream the test has read enough of.
var errStop = errors.New("enough")

// TestHostileAgent replaces a sandbox's guest agent, as root in the guest
// could, by agents that send garbage, oversized frames, endless streams, a
// slow drip, names that are not UTF-8 and event floods, and calls every
// route that reaches the agent, through the real API. hostd must answer
// each call (an error is fine), with no panic; another sandbox and the API
// answer throughout; the heap grows by a fraction of what the guest sent;
// once the hostile sandbox is deleted, no goroutine of it is left. Under
// the race detector the endless streams are shorter, and the check that the
// guest sent several times the heap budget is left to the run without it.
func TestHostileAgent(t *testing.T) {
	h := newHostileEnv(t)
	ctx := context.Background()
	// A sandbox made and deleted first, so that what the first sandbox
	// starts once (pools, the store's connections) is in the baseline.
	warm, _ := h.create(t)
	if err := h.echo(ctx, warm.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.c.DeleteSandbox(ctx, warm.ID); err != nil {
		t.Fatal(err)
	}
	other, _ := h.create(t)
	if err := h.echo(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	closeIdle()
	// The closed connections' goroutines end, client's and server's.
	waitfor.Gone(t, "net/http.(*persistConn).readLoop", "net/http.(*persistConn).writeLoop", "net/http.(*conn).serve")
	goroutines := runtime.NumGoroutine()

	hb, vm := h.create(t)
	if err := h.echo(ctx, hb.ID); err != nil {
		t.Fatal(err)
	}
	baseHeap := heapAfterGC()
	peak := sampleHeap()
	var sent atomic.Int64

	// The other sandbox and the API answer all along.
	var othersOK, othersFailed atomic.Int64
	var firstErr atomic.Value
	stopOthers := make(chan struct{})
	var others sync.WaitGroup
	others.Add(1)
	go func() {
		defer others.Done()
		for {
			select {
			case <-stopOthers:
				return
			default:
			}
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err := h.echo(cctx, other.ID)
			if err == nil {
				_, err = h.c.Health(cctx)
			}
			cancel()
			if err != nil {
				othersFailed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			} else {
				othersOK.Add(1)
			}
		}
	}()

	floodStart := time.Now()
	for _, mode := range []struct {
		name  string
		agent vmmtest.Agent
		long  bool // streams run until the test has read enough
	}{
		{"garbage", garbageAgent(&sent), false},
		{"oversized frames", oversizedAgent(&sent), false},
		{"slow drip", dripAgent(&sent), false},
		{"agent killed", closingAgent, false},
		{"endless streams, bad names, event floods", floodAgent(&sent), true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			vm.ReplaceAgent(channel.AgentPort, mode.agent)
			abuse(t, h, hb.ID, mode.long)
			if info, err := h.c.GetSandbox(ctx, hb.ID); err != nil {
				t.Errorf("get the hostile sandbox: %v", err)
			} else {
				t.Logf("hostile sandbox: %s", info.State)
			}
		})
	}
	close(stopOthers)
	others.Wait()
	checkEventRate(t, h, hb.ID, floodStart)
	top := peak.end()
	if n := othersFailed.Load(); n > 0 || othersOK.Load() == 0 {
		t.Errorf("the other sandbox: %d calls answered, %d failed (first: %v)", othersOK.Load(), n, firstErr.Load())
	}
	growth := int64(top) - int64(baseHeap)
	t.Logf("the hostile agents sent %d MiB; hostd's heap peaked %d MiB over its baseline of %d MiB",
		sent.Load()>>20, growth>>20, baseHeap>>20)
	// The heap holds what hostd's limits allow (a collected exec's output
	// budget, a listing's names, ttrpc's frame buffers), whatever the
	// guest sends: several times that must have gone through.
	if sent.Load() < 2*heapBudget && !raceEnabled {
		t.Errorf("the agents sent only %d MiB: the test did not push hard enough", sent.Load()>>20)
	}
	if growth > heapBudget {
		t.Errorf("heap grew %d MiB over its baseline, more than the %d MiB budget, for %d MiB from the guest",
			growth>>20, heapBudget>>20, sent.Load()>>20)
	}

	// The VM's agent is the real one again: the sandbox deletes cleanly
	// and leaves nothing running in hostd.
	vm.ReplaceAgent(channel.AgentPort, nil)
	if err := h.c.DeleteSandbox(ctx, hb.ID); err != nil {
		t.Fatalf("delete the hostile sandbox: %v", err)
	}
	if err := h.echo(ctx, other.ID); err != nil {
		t.Fatalf("the other sandbox after the delete: %v", err)
	}
	closeIdle()
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(60 * time.Second); n > goroutines && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(100 * time.Millisecond)
		closeIdle()
	}
	if n > goroutines {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("%d goroutines after the hostile sandbox was deleted, %d before it was made:\n%s", n, goroutines, b.String())
	}
	retained := int64(heapAfterGC()) - int64(baseHeap)
	t.Logf("heap retained after the delete: %d KiB", retained>>10)
	if retained > heapBudget/8 {
		t.Errorf("heap kept %d MiB over its baseline after the delete", retained>>20)
	}
}

// abuse calls each route that reaches the agent, at once, each bounded by
// its own ctx: each must come back, an error or not, with hostd up.
func abuse(t *testing.T, h *hostileEnv, id string, long bool) {
	t.Helper()
	calls := map[string]func(ctx context.Context) error{
		"collected exec": func(ctx context.Context) error {
			_, err := h.c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"true"}})
			return err
		},
		"streamed exec": func(ctx context.Context) error {
			got := 0
			return h.c.ExecStream(ctx, id, client.ExecRequest{Cmd: []string{"true"}}, func(e client.Event) error {
				if got += len(e.Data); got > endless {
					return errStop
				}
				return nil
			})
		},
		"list": func(ctx context.Context) error { _, err := h.c.ListDir(ctx, id, "/root"); return err },
		"stat": func(ctx context.Context) error { _, err := h.c.Stat(ctx, id, "/root/x"); return err },
		"read": func(ctx context.Context) error { return h.c.ReadFile(ctx, id, "/root/x", &limitWriter{n: endless}) },
		"write": func(ctx context.Context) error {
			return h.c.WriteFile(ctx, id, "/root/y", 0o644, strings.NewReader("hostile"))
		},
		"events": func(ctx context.Context) error { _, err := h.c.Events(ctx, id, client.EventQuery{}); return err },
		"execs":  func(ctx context.Context) error { _, err := h.c.ListExecs(ctx, id); return err },
	}
	var wg sync.WaitGroup
	for name, fn := range calls {
		run := func() {
			timeout := 4 * time.Second
			if long && (name == "streamed exec" || name == "read") {
				timeout = 5 * time.Minute // an endless stream runs until the test has read enough
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			t.Logf("%s: %v", name, fn(ctx))
		}
		if long {
			// One at a time: each holds at most what its limit allows.
			base, s := heapAfterGC(), sampleHeap()
			run()
			t.Logf("  %s: heap peaked %d MiB over %d MiB", name, (int64(s.end())-int64(base))>>20, base>>20)
			continue
		}
		wg.Go(run)
	}
	wg.Wait()
	if _, err := h.c.Health(context.Background()); err != nil {
		t.Fatalf("the API is down: %v", err)
	}
}

// limitWriter takes n bytes, then fails with errStop.
type limitWriter struct{ n int }

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errStop
	}
	return len(p), nil
}

// checkEventRate checks that the guest's event floods were recorded at no
// more than the recorder's rate for guest events (500/s, bursts of 5000).
func checkEventRate(t *testing.T, h *hostileEnv, id string, since time.Time) {
	t.Helper()
	n, after := 0, int64(0)
	for {
		list, err := h.c.Events(context.Background(), id, client.EventQuery{Types: []client.AuditEventType{client.AuditEventTypeFile}, After: after, Limit: 1000})
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		n += len(list.Events)
		if len(list.Events) == 0 || list.NextAfter <= after {
			break
		}
		after = list.NextAfter
	}
	// An upper bound: a slower run only allows more.
	allowed := 5000 + int(500*time.Since(since).Seconds()) + 512
	t.Logf("guest file events recorded: %d (at most %d allowed)", n, allowed)
	if n == 0 || n > allowed {
		t.Errorf("%d guest file events recorded, want 1..%d", n, allowed)
	}
}
