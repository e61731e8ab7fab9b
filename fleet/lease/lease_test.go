package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/lease"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/fleet/store/storetest"
	"github.com/agentbox/agentbox/internal/waitfor"
)

var secret = []byte("a fleet secret of the tests")

func open(t *testing.T) *store.Store {
	st, _ := storetest.Open(t)
	return st
}

// run runs l until the test ends (or stop is called).
func run(t *testing.T, l *lease.Leader) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func register(t *testing.T, st *store.Store, name string, ttl time.Duration, token string) int64 {
	t.Helper()
	ep, _, err := st.Register(context.Background(), store.Registration{Name: name, Addr: "http://" + name,
		TokenHash: hosttoken.Hash(token), TTL: ttl, Capacity: store.Capacity{MemMiB: 4096, VCPUs: 8}})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func getHost(t *testing.T, st *store.Store, name string) store.Host {
	t.Helper()
	h, err := st.GetHost(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// replica is one control-plane replica's way to the real database, which
// the test can cut (its calls then fail as if the database were
// unreachable from it).
type replica struct {
	*store.Store
	cut   atomic.Bool
	tries atomic.Int64
}

var errCut = fmt.Errorf("%w: cut by the test", store.ErrUnavailable)

func (r *replica) TryLead(ctx context.Context, key int64) (*store.LeaderLock, error) {
	r.tries.Add(1)
	if r.cut.Load() {
		return nil, errCut
	}
	return r.Store.TryLead(ctx, key)
}

func (r *replica) ExpireLeases(ctx context.Context) ([]store.Expired, error) {
	if r.cut.Load() {
		return nil, errCut
	}
	return r.Store.ExpireLeases(ctx)
}

// Of two leaders one leads; when its lock's connection dies the other
// takes over, and on taking the lead extends every live lease first.
func TestOneLeadsTheOtherTakesOver(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	ttl := time.Second
	ra, rb := &replica{Store: st}, &replica{Store: st}
	a := &lease.Leader{Store: ra, Secret: secret, TTL: ttl, Name: "a"}
	b := &lease.Leader{Store: rb, Secret: secret, TTL: ttl, Name: "b"}
	run(t, a)
	run(t, b)
	waitfor.Cond(t, "one to lead", func() bool { return a.IsLeader() || b.IsLeader() })
	first, second, rfirst, rsecond := a, b, ra, rb
	if b.IsLeader() {
		first, second, rfirst, rsecond = b, a, rb, ra
	}
	// The other keeps trying and never leads beside it.
	tries := rsecond.tries.Load()
	waitfor.Cond(t, "three more tries of the other", func() bool {
		if second.IsLeader() {
			t.Fatal("both lead")
		}
		return rsecond.tries.Load() >= tries+3
	})
	// The leader's connection dies, and its replica cannot reach the
	// database again; the other is held off a moment.
	rsecond.cut.Store(true)
	n := rsecond.tries.Load()
	waitfor.Cond(t, "the other's try in flight to end", func() bool { return rsecond.tries.Load() > n })
	rfirst.cut.Store(true)
	if n, err := st.EndLockHolder(ctx, store.LeaderKey); err != nil || n != 1 {
		t.Fatalf("ended %d lock holders: %v", n, err)
	}
	waitfor.Cond(t, "the leader to step down", func() bool { return !first.IsLeader() })
	// Meanwhile a host's lease lapsed: its heartbeats could not get through
	// while no one led.
	register(t, st, "h1", time.Millisecond, hosttoken.Token(secret, "h1"))
	before := getHost(t, st, "h1").LeaseUntil
	rsecond.cut.Store(false)
	waitfor.Cond(t, "the other to take the lead", second.IsLeader)
	h := getHost(t, st, "h1")
	if h.State != store.HostLive || !h.LeaseUntil.After(before.Add(ttl/2)) {
		t.Fatalf("h1 after the take-over: %+v (lease was %v)", h, before)
	}
	if c := second.Counters(); c.Terms != 1 || c.LeasesExpired != 0 {
		t.Fatalf("the new leader's counters %+v", c)
	}
	if !strings.Contains(second.Metrics(), "agentbox_fleet_leader 1\n") || !strings.Contains(first.Metrics(), "agentbox_fleet_leader 0\n") {
		t.Fatalf("metrics:\n%s\n%s", second.Metrics(), first.Metrics())
	}
}

// A host that stops heartbeating is expired: dead, its epoch bumped, its
// sandboxes lost with a reason; a host whose token the secret does not
// give it is refused.
func TestExpiryAndRefusal(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	register(t, st, "good", time.Hour, hosttoken.Token(secret, "good"))
	ep := register(t, st, "dying", time.Hour, hosttoken.Token(secret, "dying"))
	register(t, st, "bad", time.Hour, hosttoken.Token([]byte("another fleet's secret"), "bad"))
	for i, h := range []string{"good", "dying"} {
		r, err := st.Reserve(ctx, store.Need{Project: store.DefaultProject, MemoryMiB: 256, VCPUs: 1}, []string{h})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(ctx, r.Placeholders[0], []string{"sb-good", "sb-dying"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	ttl := 500 * time.Millisecond
	l := &lease.Leader{Store: st, Secret: secret, TTL: ttl}
	run(t, l)
	waitfor.Cond(t, "bad to be refused", func() bool { return getHost(t, st, "bad").State == store.HostRefused })
	if r := getHost(t, st, "bad").Reason; !strings.Contains(r, "token") {
		t.Fatalf("refusal's reason %q", r)
	}
	// dying's last heartbeat gives it a lease shorter than the leader waits.
	if err := st.Heartbeat(ctx, "dying", ep, time.Millisecond, store.Capacity{MemMiB: 4096, VCPUs: 8}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "dying to be expired", func() bool { return getHost(t, st, "dying").State == store.HostDead })
	h := getHost(t, st, "dying")
	if h.Epoch != ep+1 || !strings.Contains(h.Reason, "lease expired") {
		t.Fatalf("dying %+v", h)
	}
	sb, err := st.Get(ctx, "sb-dying")
	if err != nil || sb.State != store.StateLost || !strings.Contains(sb.Reason, "host dying stopped answering") {
		t.Fatalf("sb-dying %+v %v", sb, err)
	}
	if sb, _ := st.Get(ctx, "sb-good"); sb.State != store.StateRunning {
		t.Fatalf("sb-good %+v", sb)
	}
	if g := getHost(t, st, "good"); g.State != store.HostLive {
		t.Fatalf("good %+v", g)
	}
	if c := l.Counters(); c.LeasesExpired != 1 || c.SandboxesLost != 1 || c.HostsRefused != 1 {
		t.Fatalf("counters %+v", c)
	}
	// The dead host's old life is fenced.
	if err := st.Heartbeat(ctx, "dying", ep, time.Hour, store.Capacity{}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale heartbeat: %v", err)
	}
}
