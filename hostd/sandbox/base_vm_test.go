//go:build vm

package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestBaseSnapshot: the first create boots and becomes the base snapshot;
// the next creates restore it (or claim its warm sandbox), each with its
// own identity and entropy; a cold boot skips it.
func TestBaseSnapshot(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	m := newManager(t, data, func(o *sandbox.Options) { o.BaseSnapshots, o.BasePool = true, 1 })
	ctx := context.Background()
	first, err := m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := first.SnapshotID
	sn, err := m.Service().GetSnapshot(ctx, base)
	if err != nil || sn.Kind != "base" {
		t.Fatalf("first create: snapshot %q: %+v, %v; want a base snapshot", base, sn, err)
	}
	sh(t, m, first.ID, "echo first > /root/mine")
	waitPool(t, m)
	claimed, err := m.Create(ctx, sandbox.CreateOptions{Env: map[string]string{"WHO": "claimed"}})
	if err != nil {
		t.Fatal(err)
	}
	restored, err := m.Create(ctx, sandbox.CreateOptions{}) // the pool refills meanwhile, or not yet
	if err != nil {
		t.Fatal(err)
	}
	// The base snapshot's and the pool's warm-up execs leave no session
	// behind: a new sandbox lists none.
	for _, sb := range []sandbox.Info{claimed, restored} {
		if list, err := m.Service().Sessions(ctx, sb.ID); err != nil || len(list) != 0 {
			t.Errorf("%s: sessions before any exec: %+v, %v; want none", sb.ID, list, err)
		}
	}
	hosts, rand, machines := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, sb := range []sandbox.Info{first, claimed, restored} {
		hosts[sh(t, m, sb.ID, "hostname")] = true
		// The identity files are tmpfs files bound over /etc's (guestinit's
		// bindIdentity): they say the same as the kernel.
		if got, want := sh(t, m, sb.ID, "cat /etc/hostname; grep -c ' /etc/hostname tmpfs ' /proc/mounts"), sb.ID+"\n1\n"; got != want {
			t.Errorf("%s: /etc/hostname and its mount: got %q, want %q", sb.ID, got, want)
		}
		machines[sh(t, m, sb.ID, "cat /etc/machine-id")] = true
		rand[sh(t, m, sb.ID, "head -c 16 /dev/urandom | od -An -tx1")] = true
		if sb.ID != first.ID && sb.SnapshotID != base {
			t.Errorf("%s: snapshot %q, want the base %s", sb.ID, sb.SnapshotID, base)
		}
	}
	if len(hosts) != 3 || len(rand) != 3 || len(machines) != 3 {
		t.Errorf("got %d hostnames, %d urandom reads and %d machine ids over 3 sandboxes, want 3 of each", len(hosts), len(rand), len(machines))
	}
	if got := sh(t, m, claimed.ID, "echo $WHO; cat /root/mine 2>/dev/null || echo none"); got != "claimed\nnone\n" {
		t.Errorf("claimed sandbox: got %q, want its own env and not the first one's file", got)
	}
	// A restored sandbox has memory of its own, so its forks share their
	// snapshot's memory file as a booted sandbox's do.
	forks, err := m.Fork(ctx, restored.ID, sandbox.ForkOptions{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(t, m, forks[0].ID, "echo $((6*7))"); got != "42\n" {
		t.Errorf("fork of a restored sandbox: got %q", got)
	}
	if _, err := os.Stat(filepath.Join(data, "snapshots", forks[0].SnapshotID, "memory")); err != nil {
		t.Errorf("fork snapshot of a restored sandbox: %v, want its memory as a file", err)
	}
	if err := m.Delete(ctx, forks[0].ID); err != nil {
		t.Fatal(err)
	}
	cold, err := m.Create(ctx, sandbox.CreateOptions{Boot: sandbox.BootCold})
	if err != nil {
		t.Fatal(err)
	}
	if cold.SnapshotID != "" {
		t.Errorf("cold boot: snapshot %q, want none", cold.SnapshotID)
	}
	for _, sb := range []sandbox.Info{first, claimed, restored, cold} {
		if err := m.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Service().GetSnapshot(ctx, base); err != nil {
		t.Errorf("base snapshot after its sandboxes went: %v, want kept", err)
	}
	badBase(t, m, data)
}

// badBase: a base snapshot whose files were damaged is not restored: the
// create boots cold instead, that boot becomes the shape's new base
// snapshot, and the damaged one (used by nothing) is removed. A shape of
// its own keeps the warm pool out of it.
func badBase(t *testing.T, m *sandbox.Manager, data string) {
	ctx := context.Background()
	shape := sandbox.CreateOptions{MemoryMiB: 320}
	a, err := m.Create(ctx, shape)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(data, "snapshots", a.SnapshotID, "state")
	if err := os.WriteFile(state, []byte("not a migration stream"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, shape)
	if err != nil {
		t.Fatalf("create over a damaged base snapshot: %v, want a cold boot", err)
	}
	defer func() {
		if err := m.Delete(ctx, b.ID); err != nil {
			t.Error(err)
		}
	}()
	if got := sh(t, m, b.ID, "echo $((6*7))"); got != "42\n" {
		t.Errorf("sandbox booted over a damaged base: got %q", got)
	}
	if b.SnapshotID == "" || b.SnapshotID == a.SnapshotID {
		t.Errorf("create over a damaged base: snapshot %q, want a new base snapshot (the damaged one is %s)", b.SnapshotID, a.SnapshotID)
	}
	if _, err := m.Service().GetSnapshot(ctx, a.SnapshotID); err == nil {
		t.Errorf("the damaged base snapshot %s is still listed", a.SnapshotID)
	}
}

// waitPool waits for the base snapshot's warm pool to hold a sandbox.
func waitPool(t *testing.T, m *sandbox.Manager) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for name, n := range m.PoolSizes() {
			if n > 0 && len(name) > 0 && name[0] == '@' {
				return
			}
		}
	}
	t.Fatal("the base snapshot's warm pool did not fill")
}
