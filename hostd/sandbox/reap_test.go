package sandbox

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/hostd/store"
)

// listedCgroups is a Cgroups that lists a fixed set of groups and records
// the ones removed.
type listedCgroups struct {
	mu      sync.Mutex
	ids     []string
	removed []string
}

func (c *listedCgroups) Create(string, cgroup.Limits) (*cgroup.Group, error) { return nil, nil }
func (c *listedCgroups) List() ([]string, error)                             { return c.ids, nil }
func (c *listedCgroups) Remove(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removed = append(c.removed, id)
	return nil
}

// reapStore opens a store in data holding a record of each sandbox, in
// its state.
func reapStore(t *testing.T, data string, recs map[string]State) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for id, state := range recs {
		if err := st.PutSandbox(ctx, store.Sandbox{ID: id, State: string(state), VCPUs: 1, MemoryMiB: 256,
			Dir: filepath.Join(data, "sandboxes", id), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestReaperSparesResumingSandboxes: a sandbox that two reaper rounds in a
// row catch resuming (its cgroup made, its new VM not yet registered) is
// not an orphan; a cgroup that no record names is.
func TestReaperSparesResumingSandboxes(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	st := reapStore(t, data, map[string]State{"sb-resuming": StateResuming, "sb-creating": StateCreating})
	cg := &listedCgroups{ids: []string{"sb-resuming", "sb-creating", "sb-orphan"}}
	r := &reaper{cgroups: cg, store: st, dataDir: data, log: slog.New(slog.DiscardHandler), held: &cgroupLedger{},
		owned: func() map[string]bool { return map[string]bool{} }, killVM: func(string, string) {}}
	r.reapOnce(ctx, r.reapOnce(ctx, map[string]bool{}))
	if !slices.Equal(cg.removed, []string{"sb-orphan"}) {
		t.Errorf("reaper removed %q, want only sb-orphan", cg.removed)
	}
}

// TestReaperSparesHeldGroups: a cgroup that a sandbox holds is never an
// orphan, whatever its record says and even when the live set does not
// name it (a resume between registering its box and setting its state, the
// race the full soak found at pause/resume cycle 66); once released, it is.
func TestReaperSparesHeldGroups(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	st := reapStore(t, data, map[string]State{"sb-resumed": StateRunning})
	cg := &listedCgroups{ids: []string{"sb-resumed"}}
	held := &cgroupLedger{}
	_, release, err := held.hold("sb-resumed", func() (*cgroup.Group, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	r := &reaper{cgroups: cg, store: st, dataDir: data, log: slog.New(slog.DiscardHandler), held: held,
		owned: func() map[string]bool { return map[string]bool{} }, killVM: func(string, string) {}}
	// A suspect from an earlier round (caught pausing, say) is spared too.
	r.reapOnce(ctx, map[string]bool{"sb-resumed": true})
	r.reapOnce(ctx, r.reapOnce(ctx, map[string]bool{}))
	if len(cg.removed) != 0 {
		t.Fatalf("reaper removed %q, held by a sandbox", cg.removed)
	}
	release()
	release() // a second release changes nothing
	r.reapOnce(ctx, r.reapOnce(ctx, map[string]bool{}))
	if !slices.Equal(cg.removed, []string{"sb-resumed"}) {
		t.Errorf("reaper removed %q once the group was released, want sb-resumed", cg.removed)
	}
}

// TestGroupsHoldWaitsForReap: a group made while the reaper takes the same
// id is made after the reaper is done, never in between its check and its
// kill; and a group held by then is not reaped.
func TestGroupsHoldWaitsForReap(t *testing.T) {
	var g cgroupLedger
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	entered, proceed := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		g.unheld("sb-1", func() { close(entered); <-proceed; note("reaped") })
	}()
	<-entered
	go func() {
		defer wg.Done()
		_, _, _ = g.hold("sb-1", func() (*cgroup.Group, error) { note("made"); return nil, nil })
	}()
	close(proceed)
	wg.Wait()
	if !slices.Equal(order, []string{"reaped", "made"}) {
		t.Errorf("order %q, want the reap before the make", order)
	}
	if g.unheld("sb-1", func() { t.Error("reaped a held group") }) {
		t.Error("unheld ran on a held group")
	}
}
