package snapshot_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// dialGuest is a snapshot.Guest over real agent connections to a fake VM,
// as hostd's box is: Reconnect dials, probes each connection and drops one
// that fails its probe for a fresh one, and on failure stops the VM. Wake
// calls it from one goroutine.
type dialGuest struct {
	vm vmm.VM
	// cut: the first cut connections close before their probe, as a
	// channel whose guest never answers.
	cut int
	// fail, if set, is what Reconnect fails with (it stops the VM).
	fail error
	// open: Reconnect finds a connection open and probes nothing, so that
	// Client dials one.
	open bool

	c        *agentclient.Client
	attempts int
}

var _ snapshot.Guest = (*dialGuest)(nil)

func (g *dialGuest) Reconnect(ctx context.Context, timeout time.Duration, probe snapshot.Probe) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := func(err error) error { return errors.Join(err, g.vm.Stop(context.WithoutCancel(ctx))) }
	if g.fail != nil {
		return stop(g.fail)
	}
	if g.open {
		return nil
	}
	for {
		g.attempts++
		c, err := g.dial(ctx)
		if err != nil {
			return stop(err)
		}
		if g.attempts <= g.cut {
			c.Close()
		}
		if err := probe(ctx, c); err != nil {
			c.Close()
			if ctx.Err() != nil {
				return stop(err)
			}
			continue
		}
		g.c = c
		return nil
	}
}

func (g *dialGuest) Client(ctx context.Context) (*agentclient.Client, error) {
	if g.c != nil {
		return g.c, nil
	}
	c, err := g.dial(ctx)
	g.c = c
	return c, err
}

func (g *dialGuest) dial(ctx context.Context) (*agentclient.Client, error) {
	conn, err := g.vm.Dial(ctx, channel.AgentPort)
	if err != nil {
		return nil, err
	}
	return agentclient.New(conn), nil
}

func (g *dialGuest) close() {
	if g.c != nil {
		g.c.Close()
	}
}

// restored returns a paused copy of a snapshot of VM sb-1 (hostname sb-1).
// refuse makes its agent answer SetIdentity with an error.
func restored(t *testing.T, refuse error) (*rig, *vmmtest.FakeVM) {
	t.Helper()
	r, sn := captured(t, snapshot.KindSnapshot)
	r.d.RefuseIdentity(refuse)
	vm, err := r.e.StartCopy(context.Background(), r.d, (&copyHooks{}).copyOf(t, r, snapshot.From{Snapshot: sn}))
	if err != nil {
		t.Fatal(err)
	}
	return r, vm.(*vmmtest.FakeVM)
}

func stopped(vm *vmmtest.FakeVM) bool {
	select {
	case <-vm.Done():
		return true
	default:
		return false
	}
}

// TestWake: a wake resumes the VM and connects its agent, whose first
// calls set the clock, the entropy and, for a new sandbox, its identity.
// A connection that got no answer is dropped for a new one.
func TestWake(t *testing.T) {
	for _, tc := range []struct {
		name     string
		identity bool
		guest    dialGuest
		hostname string
		attempts int
	}{
		{name: "new identity", identity: true, hostname: "sb-new", attempts: 1},
		{name: "same identity", hostname: "sb-1", attempts: 1},
		{name: "no answer at first", identity: true, guest: dialGuest{cut: 2}, hostname: "sb-new", attempts: 3},
		{name: "connected already", identity: true, guest: dialGuest{open: true}, hostname: "sb-new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, vm := restored(t, nil)
			g := &tc.guest
			g.vm = vm
			t.Cleanup(g.close)
			var phases []string
			ctx := context.Background()
			err := snapshot.Wake(ctx, vm, g, snapshot.WakeOptions{ID: "sb-new", Identity: tc.identity, Timeout: time.Minute,
				Phase: func(name string) { phases = append(phases, name) }})
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"resume", "agent"}; !slices.Equal(phases, want) {
				t.Errorf("phases: got %v, want %v", phases, want)
			}
			if vm.Paused() || g.attempts != tc.attempts {
				t.Errorf("paused %v after %d connections; want running after %d", vm.Paused(), g.attempts, tc.attempts)
			}
			h, err := g.c.Health(ctx)
			if err != nil || h.Hostname != tc.hostname {
				t.Errorf("health: %v, %v; want hostname %s", h, err, tc.hostname)
			}
			ids := 0
			if tc.identity {
				ids = 1
			}
			for name, want := range map[string]int{"SetTime": 1, "Reseed": 1, "SetIdentity": ids} {
				if got := vm.SystemCalls(name); got != want {
					t.Errorf("%s: %d calls, want %d", name, got, want)
				}
			}
		})
	}
}

// TestWakeFails: a wake that fails leaves no VM running: a VM that does
// not resume, an agent that does not connect (the guest stops it), an
// agent that answers the identity with an error (at once: no new
// connection gets another answer).
func TestWakeFails(t *testing.T) {
	gone := errors.New("agent gone")
	refused := errors.New("hostname refused")
	for _, tc := range []struct {
		name     string
		refuse   error
		guest    dialGuest
		stop     bool // the VM is stopped before the wake
		want     error
		phases   []string
		attempts int
	}{
		{name: "no resume", stop: true, want: vmm.ErrNotRunning},
		{name: "no agent", guest: dialGuest{fail: gone}, want: gone, phases: []string{"resume"}},
		{name: "identity refused", refuse: refused, phases: []string{"resume"}, attempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, vm := restored(t, tc.refuse)
			g := &tc.guest
			g.vm = vm
			t.Cleanup(g.close)
			ctx := context.Background()
			if tc.stop {
				if err := vm.Stop(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var phases []string
			err := snapshot.Wake(ctx, vm, g, snapshot.WakeOptions{ID: "sb-new", Identity: true, Timeout: time.Minute,
				Phase: func(name string) { phases = append(phases, name) }})
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !slices.Equal(phases, tc.phases) || g.attempts != tc.attempts {
				t.Errorf("phases %v after %d connections; want %v after %d", phases, g.attempts, tc.phases, tc.attempts)
			}
			if !stopped(vm) {
				t.Error("the VM of a failed wake runs")
			}
		})
	}
}
