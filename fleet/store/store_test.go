package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/fleet/store/storetest"
	"github.com/agentbox/agentbox/internal/pgserver"
)

// open starts a PostgreSQL server for the test and opens a store on it.
func open(t *testing.T) (*store.Store, *pgserver.Server) { return storetest.Open(t) }

func register(t *testing.T, st *store.Store, name string, ttl time.Duration, c store.Capacity) int64 {
	t.Helper()
	ep, _, err := st.Register(context.Background(), store.Registration{Name: name, Addr: "http://" + name, TokenHash: "h", TTL: ttl, Capacity: c})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func TestPlacementHoldsCapacityAndQuota(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	register(t, st, "a", time.Minute, store.Capacity{MemMiB: 1024, VCPUs: 8, MaxSandboxes: 3})
	register(t, st, "b", time.Minute, store.Capacity{MemMiB: 4096, VCPUs: 8})
	need := store.Need{Project: store.DefaultProject, Count: 2, MemoryMiB: 512, VCPUs: 1}
	r, err := st.Reserve(ctx, need, []string{"a", "b"})
	if err != nil || r.Host.Name != "a" || len(r.Placeholders) != 2 {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	// a is full (1024 MiB): the next goes to b.
	r2, err := st.Reserve(ctx, store.Need{Project: store.DefaultProject, Count: 1, MemoryMiB: 512, VCPUs: 1}, []string{"a", "b"})
	if err != nil || r2.Host.Name != "b" {
		t.Fatalf("reserve 2: %+v %v", r2, err)
	}
	if err := st.Commit(ctx, r2.Placeholders[0], "sb-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(ctx, store.Need{Project: store.DefaultProject, Count: 1, MemoryMiB: 8192, VCPUs: 1}, []string{"a", "b"}); !errors.Is(err, store.ErrNoCapacity) {
		t.Fatalf("over capacity: %v", err)
	}
	if err := st.Unreserve(ctx, r.Placeholders); err != nil {
		t.Fatal(err)
	}
	h, _ := st.GetHost(ctx, "a")
	if h.UsedMemMiB != 0 || h.UsedSandboxes != 0 {
		t.Fatalf("unreserve left %+v", h)
	}
	if _, err := st.CreateProject(ctx, store.Project{Name: "p", MaxSandboxes: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(ctx, store.Need{Project: "p", Count: 2, MemoryMiB: 1, VCPUs: 1}, []string{"b"}); !errors.Is(err, store.ErrQuota) {
		t.Fatalf("quota: %v", err)
	}
}

func TestExpiredLeaseFencesTheHost(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	ep := register(t, st, "a", time.Millisecond, store.Capacity{MemMiB: 1024, VCPUs: 8})
	register(t, st, "b", time.Hour, store.Capacity{MemMiB: 1024, VCPUs: 8})
	for _, h := range []string{"a", "b"} {
		// a's lease has lapsed already: placing there is refused.
		r, err := st.Reserve(ctx, store.Need{Project: store.DefaultProject, MemoryMiB: 64, VCPUs: 1}, []string{h})
		if h == "a" {
			if !errors.Is(err, store.ErrNoCapacity) {
				t.Fatalf("placed on a lapsed host: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Commit(ctx, r.Placeholders[0], "sb-"+h)
	}
	// Give a a sandbox from before its lease lapsed.
	if err := st.Heartbeat(ctx, "a", ep, time.Hour, store.Capacity{MemMiB: 1024, VCPUs: 8}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Reserve(ctx, store.Need{Project: store.DefaultProject, MemoryMiB: 64, VCPUs: 1}, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Commit(ctx, r.Placeholders[0], "sb-a")
	if err := st.Heartbeat(ctx, "a", ep, time.Millisecond, store.Capacity{MemMiB: 1024, VCPUs: 8}); err != nil {
		t.Fatal(err)
	}
	var exp []store.Expired
	for len(exp) == 0 {
		if exp, err = st.ExpireLeases(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(exp) != 1 || exp[0].Host != "a" || exp[0].Lost != 1 {
		t.Fatalf("expired %+v", exp)
	}
	sb, err := st.Get(ctx, "sb-a")
	if err != nil || sb.State != store.StateLost || sb.Reason == "" {
		t.Fatalf("sb-a %+v %v", sb, err)
	}
	if sb, _ := st.Get(ctx, "sb-b"); sb.State != store.StateRunning {
		t.Fatalf("sb-b %+v", sb)
	}
	if err := st.Heartbeat(ctx, "a", ep, time.Hour, store.Capacity{}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale heartbeat: %v", err)
	}
	ep2, owned, err := st.Register(ctx, store.Registration{Name: "a", Addr: "http://a", TokenHash: "h", TTL: time.Hour})
	if err != nil || ep2 <= ep+1 || len(owned) != 0 {
		t.Fatalf("re-register: epoch %d (was %d) owned %v %v", ep2, ep, owned, err)
	}
}

func TestRevocationIsAnnounced(t *testing.T) {
	st, _ := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, err := st.CreateKey(ctx, store.APIKey{ID: "key_1", Name: "k", Prefix: "abcdefgh", Project: store.DefaultProject, Role: store.RoleMember, Hash: "hash1"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.Listen(ctx, store.KeysChannel, func() { close(ready) }, func(p string) { got <- p })
	}()
	<-ready
	if _, err := st.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "hash1" {
		t.Fatalf("notified %q", p)
	}
	k, _ = st.KeyByHash(ctx, "hash1")
	if k.Usable(time.Now()) {
		t.Fatal("revoked key usable")
	}
	cancel()
	<-done
}

func TestSetDurableKeepsTheNewest(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	register(t, st, "a", time.Hour, store.Capacity{MemMiB: 1024, VCPUs: 8})
	r, err := st.Reserve(ctx, store.Need{Project: store.DefaultProject, MemoryMiB: 64, VCPUs: 1}, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, r.Placeholders[0], "sb-1"); err != nil {
		t.Fatal(err)
	}
	if sb, _ := st.Get(ctx, "sb-1"); sb.Durable != "" || !sb.DurableAt.IsZero() {
		t.Fatalf("new sandbox durable: %+v", sb)
	}
	t1 := time.Now().Truncate(time.Microsecond)
	if err := st.SetDurable(ctx, "sb-1", "m-2", t1.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// An older report that arrives late changes nothing.
	if err := st.SetDurable(ctx, "sb-1", "m-1", t1); err != nil {
		t.Fatal(err)
	}
	sb, err := st.Get(ctx, "sb-1")
	if err != nil || sb.Durable != "m-2" || !sb.DurableAt.Equal(t1.Add(time.Second)) {
		t.Fatalf("durable %q at %v (%v)", sb.Durable, sb.DurableAt, err)
	}
	if err := st.SetDurable(ctx, "sb-none", "m", t1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown sandbox: %v", err)
	}
}

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

func TestDurableSandboxesOfADeadHostArePausedAndMove(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	ep := register(t, st, "a", time.Hour, store.Capacity{MemMiB: 1024, VCPUs: 8})
	register(t, st, "b", time.Hour, store.Capacity{MemMiB: 512, VCPUs: 8})
	place(t, st, "a", "sb-durable")
	place(t, st, "a", "sb-plain")
	if err := st.SetDurable(ctx, "sb-durable", "m-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	// The host lacks a durable paused sandbox: that is no reason to forget it.
	if err := st.SetState(ctx, "sb-durable", store.StatePaused); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Forget(ctx, "a", ep, []string{"sb-durable"}, time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("forgot %d durable paused (%v)", n, err)
	}
	_ = st.SetState(ctx, "sb-durable", store.StateRunning)
	if err := st.Heartbeat(ctx, "a", ep, time.Millisecond, store.Capacity{MemMiB: 1024, VCPUs: 8}); err != nil {
		t.Fatal(err)
	}
	var exp []store.Expired
	for len(exp) == 0 {
		var err error
		if exp, err = st.ExpireLeases(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(exp) != 1 || exp[0].Lost != 1 || exp[0].Paused != 1 {
		t.Fatalf("expired %+v", exp)
	}
	sb, err := st.Get(ctx, "sb-durable")
	if err != nil || sb.State != store.StatePaused || !sb.Portable() || !strings.Contains(sb.Reason, "durable snapshot") {
		t.Fatalf("durable sandbox after expiry: %+v %v", sb, err)
	}
	if sb, _ := st.Get(ctx, "sb-plain"); sb.State != store.StateLost {
		t.Fatalf("plain sandbox after expiry: %+v", sb)
	}
	// A stale generation is refused; the current one moves to b.
	if _, err := st.Move(ctx, "sb-durable", sb.Gen-1, []string{"a", "b"}, store.StatePaused); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale move: %v", err)
	}
	h, err := st.Move(ctx, "sb-durable", sb.Gen, []string{"a", "b"}, store.StatePaused)
	if err != nil || h.Name != "b" {
		t.Fatalf("move: %+v %v", h, err)
	}
	moved, _ := st.Get(ctx, "sb-durable")
	if moved.Host != "b" || moved.HostEpoch != h.Epoch || moved.Gen != sb.Gen+1 || moved.Durable != "m-1" {
		t.Fatalf("moved row %+v", moved)
	}
	if hb, _ := st.GetHost(ctx, "b"); hb.UsedSandboxes != 1 || hb.UsedMemMiB != 256 {
		t.Fatalf("b's counters %+v", hb)
	}
	// b has room for one more 256 MiB sandbox, not two.
	place(t, st, "b", "sb-b")
	if _, err := st.Move(ctx, "sb-b", 1, []string{"b"}, store.StatePaused); !errors.Is(err, store.ErrNoCapacity) {
		t.Fatalf("move to its own host: %v", err)
	}
	if ok, err := st.SetMoving(ctx, "sb-b", time.Now().Add(time.Minute)); !ok || err != nil {
		t.Fatalf("mark moving: %v %v", ok, err)
	}
	if ok, _ := st.SetMoving(ctx, "sb-b", time.Now().Add(time.Minute)); ok {
		t.Fatal("two moves at once")
	}
	if sb, _ := st.Get(ctx, "sb-b"); !sb.MovingUntil.After(time.Now()) {
		t.Fatalf("moving mark %+v", sb)
	}
	_, _ = st.SetMoving(ctx, "sb-b", time.Time{})
	if on, err := st.OnHost(ctx, "b"); err != nil || len(on) != 2 {
		t.Fatalf("on b: %v %v", on, err)
	}
}
