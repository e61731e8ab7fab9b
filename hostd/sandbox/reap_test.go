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

// TestReaperSparesResumingSandboxes: a sandbox that two reaper rounds in a
// row catch resuming (its cgroup made, its new VM not yet registered) is
// not an orphan; a cgroup that no record names is.
func TestReaperSparesResumingSandboxes(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for id, state := range map[string]State{"sb-resuming": StateResuming, "sb-creating": StateCreating} {
		if err := st.PutSandbox(ctx, store.Sandbox{ID: id, State: string(state), VCPUs: 1, MemoryMiB: 256,
			Dir: filepath.Join(data, "sandboxes", id), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	cg := &listedCgroups{ids: []string{"sb-resuming", "sb-creating", "sb-orphan"}}
	r := &reaper{cgroups: cg, store: st, dataDir: data, log: slog.New(slog.DiscardHandler),
		owned: func() map[string]bool { return map[string]bool{} }, killVM: func(string, string) {}}
	r.reapOnce(ctx, r.reapOnce(ctx, map[string]bool{}))
	if !slices.Equal(cg.removed, []string{"sb-orphan"}) {
		t.Errorf("reaper removed %q, want only sb-orphan", cg.removed)
	}
}
