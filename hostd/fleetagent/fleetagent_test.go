package fleetagent_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/fleet/store/storetest"
	"github.com/agentbox/agentbox/hostd/fleetagent"
	"github.com/agentbox/agentbox/internal/logtest"
	"github.com/agentbox/agentbox/internal/pgserver"
	"github.com/agentbox/agentbox/internal/waitfor"
)

// fakeHost is a sandbox manager with no VMs: its sandboxes are records.
type fakeHost struct {
	mu      sync.Mutex
	boxes   map[string]fleetagent.Sandbox
	deleted []string
	// gate, while set, holds every Capacity call (so heartbeats stall).
	gate chan struct{}
}

func newFakeHost(ids ...string) *fakeHost {
	h := &fakeHost{boxes: map[string]fleetagent.Sandbox{}}
	for _, id := range ids {
		h.boxes[id] = fleetagent.Sandbox{ID: id, State: "running", Created: time.Now()}
	}
	return h
}

func (h *fakeHost) List(context.Context) ([]fleetagent.Sandbox, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Values(h.boxes)), nil
}

func (h *fakeHost) Delete(_ context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.boxes, id)
	h.deleted = append(h.deleted, id)
	return nil
}

func (h *fakeHost) Capacity(ctx context.Context) (store.Capacity, error) {
	h.mu.Lock()
	gate := h.gate
	n := len(h.boxes)
	h.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return store.Capacity{}, ctx.Err()
		}
	}
	return store.Capacity{MemMiB: 8192, VCPUs: 64, Running: n, Templates: []string{"py"}, Warm: []string{"py"}}, nil
}

func (h *fakeHost) has(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.boxes[id]
	return ok
}

func (h *fakeHost) setState(id, state string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.boxes[id]
	b.State = state
	h.boxes[id] = b
}

func (h *fakeHost) deletedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.deleted)
}

func open(t *testing.T) (*store.Store, *pgserver.Server) { return storetest.Open(t) }

// place makes a committed row for sandbox id on host.
func place(t *testing.T, st *store.Store, host, id string) {
	t.Helper()
	ctx := context.Background()
	r, err := st.Reserve(ctx, store.Need{Project: store.DefaultProject, MemoryMiB: 256, VCPUs: 1}, []string{host})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, r.Placeholders[0], id); err != nil {
		t.Fatal(err)
	}
}

// start runs an agent until the test ends.
func start(t *testing.T, cfg fleetagent.Config, st fleetagent.Store, h fleetagent.Sandboxes) *fleetagent.Agent {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "h1"
	}
	cfg.Addr, cfg.TokenHash = "http://"+cfg.Name, "hash-"+cfg.Name
	if cfg.TTL == 0 {
		cfg.TTL = 600 * time.Millisecond
	}
	a := fleetagent.New(cfg, st, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return a
}

func host(t *testing.T, st *store.Store, name string) store.Host {
	t.Helper()
	h, err := st.GetHost(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The agent registers its host with its capacity and cap, and its
// heartbeats move the lease on.
func TestAgentRegistersAndHeartbeats(t *testing.T) {
	st, _ := open(t)
	fh := newFakeHost()
	a := start(t, fleetagent.Config{MaxSandboxes: 12}, st, fh)
	<-a.Registered()
	h0 := host(t, st, "h1")
	if h0.Epoch != a.Epoch() || h0.State != store.HostLive || h0.MemMiB != 8192 || h0.VCPUs != 64 || h0.MaxSandboxes != 12 ||
		h0.Addr != "http://h1" || h0.TokenHash != "hash-h1" || !slices.Equal(h0.Warm, []string{"py"}) {
		t.Fatalf("registered %+v (agent epoch %d)", h0, a.Epoch())
	}
	waitfor.Cond(t, "two heartbeats", func() bool {
		return host(t, st, "h1").Heartbeat.After(h0.Heartbeat.Add(200 * time.Millisecond))
	})
	if h := host(t, st, "h1"); h.Epoch != h0.Epoch || !h.LeaseUntil.After(h0.LeaseUntil) {
		t.Fatalf("after heartbeats %+v, registered %+v", h, h0)
	}
}

// At registration the agent stops the sandboxes its new epoch does not own;
// after the leader expires its lease (it could not heartbeat), it is
// fenced, registers again, and stops the ones that became lost.
func TestAgentFencedStopsWhatItNoLongerOwns(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	// A previous life of h1 owned sb-1; sb-stale is a VM it has no row for.
	if _, _, err := st.Register(ctx, store.Registration{Name: "h1", Addr: "x", TokenHash: "x", TTL: time.Hour,
		Capacity: store.Capacity{MemMiB: 4096, VCPUs: 8}}); err != nil {
		t.Fatal(err)
	}
	place(t, st, "h1", "sb-1")
	fh := newFakeHost("sb-1", "sb-stale")
	fh.gate = make(chan struct{})
	close(fh.gate)
	a := start(t, fleetagent.Config{}, st, fh)
	<-a.Registered()
	if !fh.has("sb-1") || fh.has("sb-stale") {
		t.Fatalf("after registration the host has sb-1 %v, sb-stale %v", fh.has("sb-1"), fh.has("sb-stale"))
	}
	ep := a.Epoch()
	// The host stops heartbeating; the leader ends its epoch.
	fh.mu.Lock()
	fh.gate = make(chan struct{})
	fh.mu.Unlock()
	var exp []store.Expired
	waitfor.Cond(t, "the lease to be expired", func() bool {
		e, err := st.ExpireLeases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exp = append(exp, e...)
		return len(exp) > 0
	})
	if exp[0].Host != "h1" || exp[0].Lost != 1 {
		t.Fatalf("expired %+v", exp)
	}
	if sb, _ := st.Get(ctx, "sb-1"); sb.State != store.StateLost {
		t.Fatalf("sb-1 after expiry: %+v", sb)
	}
	fh.mu.Lock()
	close(fh.gate)
	fh.mu.Unlock()
	waitfor.Cond(t, "the fenced host to stop sb-1", func() bool { return !fh.has("sb-1") })
	waitfor.Cond(t, "a new epoch", func() bool { return a.Epoch() > ep })
	if h := host(t, st, "h1"); h.State != store.HostLive || h.Epoch != a.Epoch() {
		t.Fatalf("after fencing %+v", h)
	}
	if d := fh.deletedIDs(); !slices.Equal(d, []string{"sb-stale", "sb-1"}) {
		t.Fatalf("deleted %v", d)
	}
}

// Through a PostgreSQL stop and start the host's sandboxes are untouched,
// and the agent goes on heartbeating in the same epoch.
func TestAgentRidesOutADatabaseOutage(t *testing.T) {
	st, pg := open(t)
	ctx := context.Background()
	if _, _, err := st.Register(ctx, store.Registration{Name: "h1", Addr: "x", TokenHash: "x", TTL: time.Hour,
		Capacity: store.Capacity{MemMiB: 4096, VCPUs: 8}}); err != nil {
		t.Fatal(err)
	}
	place(t, st, "h1", "sb-1")
	fh := newFakeHost("sb-1")
	logs := &logtest.Counter{}
	failed := logs.Seen("fleet: heartbeat failed; retrying")
	back := logs.Seen("fleet: database back; lease held")
	// A long lease: the outage must not end it.
	a := start(t, fleetagent.Config{TTL: 3 * time.Second, Logger: slog.New(logs)}, st, fh)
	<-a.Registered()
	ep := a.Epoch()
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	<-failed
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-back
	if a.Epoch() != ep || !fh.has("sb-1") || len(fh.deletedIDs()) != 0 {
		t.Fatalf("after the outage: epoch %d (was %d), sb-1 %v, deleted %v", a.Epoch(), ep, fh.has("sb-1"), fh.deletedIDs())
	}
	if h := host(t, st, "h1"); h.Epoch != ep || h.State != store.HostLive {
		t.Fatalf("host after the outage %+v", h)
	}
	if sb, err := st.Get(ctx, "sb-1"); err != nil || sb.State != store.StateRunning {
		t.Fatalf("sb-1 after the outage %+v %v", sb, err)
	}
}

// A sandbox a timeout deleted loses its row (past the grace), and a pause
// the host sees is recorded.
func TestAgentForgetsDeletedAndRecordsPauses(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	if _, _, err := st.Register(ctx, store.Registration{Name: "h1", Addr: "x", TokenHash: "x", TTL: time.Hour,
		Capacity: store.Capacity{MemMiB: 4096, VCPUs: 8}}); err != nil {
		t.Fatal(err)
	}
	place(t, st, "h1", "sb-1")
	place(t, st, "h1", "sb-2")
	fh := newFakeHost("sb-1", "sb-2")
	a := start(t, fleetagent.Config{Grace: time.Nanosecond, ReconcileEvery: 1}, st, fh)
	<-a.Registered()
	fh.mu.Lock()
	delete(fh.boxes, "sb-1") // as its timeout would
	fh.mu.Unlock()
	fh.setState("sb-2", store.StatePaused)
	waitfor.Cond(t, "sb-1's row to be forgotten", func() bool {
		_, err := st.Get(ctx, "sb-1")
		return errors.Is(err, store.ErrNotFound)
	})
	waitfor.Cond(t, "sb-2's pause to be recorded", func() bool {
		sb, err := st.Get(ctx, "sb-2")
		return err == nil && sb.State == store.StatePaused
	})
	if h := host(t, st, "h1"); h.UsedSandboxes != 1 {
		t.Fatalf("host used after forget %+v", h)
	}
}
