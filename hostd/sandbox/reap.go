package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
)

// reaper removes what no sandbox owns any more: cgroups (and whatever
// still runs in them) and sandbox directories, and old recorder events.
type reaper struct {
	cgroups   Cgroups // nil: no cgroups to reap
	store     Store
	dataDir   string
	recorder  *recorder.Recorder
	retention time.Duration
	log       *slog.Logger
	// owned returns the ids of live and warm sandboxes.
	owned func() map[string]bool
	// killVM stops the VMM recorded in a sandbox directory (by its pid and
	// start time; adopt.go).
	killVM func(id, dir string)
	// held is the ledger of the cgroups that sandboxes hold (groups.go):
	// the reaper never takes one of those.
	held *cgroupLedger
}

// Reap runs the reaper until ctx ends: every interval it removes what no
// sandbox owns any more (see ReapOnce).
func (m *Manager) Reap(ctx context.Context, interval time.Duration) { m.reaper.run(ctx, interval) }

// ReapOnce removes, at once, the instance's cgroups (and any process still
// in them) and sandbox directories that no sandbox owns. Run at start,
// before any sandbox exists.
func (m *Manager) ReapOnce(ctx context.Context) { m.reaper.now(ctx) }

func newReaper(o Options, reg *registry, ps *poolRegistry, v *vmmPlacer) *reaper {
	return &reaper{cgroups: o.Cgroups, store: o.Store, dataDir: o.DataDir, recorder: o.Recorder,
		retention: o.EventRetention, log: o.Logger, killVM: v.kill, held: &v.held,
		owned: func() map[string]bool { return ownedIDs(reg, ps) }}
}

// DefaultReapInterval is how often the reaper looks for orphans.
const DefaultReapInterval = time.Minute

// run reaps every interval until ctx ends.
func (r *reaper) run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultReapInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	suspects := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		suspects = r.reapOnce(ctx, suspects)
		r.pruneEvents(ctx)
	}
}

// pruneEvents drops flight-recorder events older than EventRetention.
func (r *reaper) pruneEvents(ctx context.Context) {
	if r.recorder == nil || r.retention <= 0 {
		return
	}
	n, err := r.recorder.Prune(ctx, time.Now().Add(-r.retention))
	if err != nil {
		r.log.Error("prune events", "err", err)
	} else if n > 0 {
		r.log.Info("pruned old events", "count", n, "retention", r.retention)
	}
}

// now reaps every orphan at once: at start nothing is being made yet, so
// an orphan's first sighting is enough. That covers the sandbox
// directories too: a warm-pool member that a killed hostd was restoring
// has no record, and its VMM (recorded in its directory, or found working
// there when the kill came before the record) is stopped now, not a
// reaper round later.
func (r *reaper) now(ctx context.Context) {
	all := map[string]bool{}
	for _, id := range r.orphanCandidates(ctx) {
		all[id] = true
	}
	for _, id := range r.orphanDirs(ctx) {
		all["dir:"+id] = true
	}
	r.reapOnce(ctx, all)
}

// reapOnce removes the orphans that were already suspects in the previous
// round (so a sandbox being created, whose cgroup exists before it is
// registered, is never taken), and returns this round's suspects.
func (r *reaper) reapOnce(ctx context.Context, suspects map[string]bool) map[string]bool {
	next := map[string]bool{}
	for _, id := range r.orphanCandidates(ctx) {
		if !suspects[id] {
			next[id] = true
			continue
		}
		r.reapCgroup(id)
	}
	for _, id := range r.orphanDirs(ctx) {
		if !suspects["dir:"+id] {
			next["dir:"+id] = true
			continue
		}
		r.reapDir(id)
	}
	return next
}

// orphanDirs lists sandbox directories that no record and no live or warm
// sandbox owns.
func (r *reaper) orphanDirs(ctx context.Context) []string {
	ents, err := os.ReadDir(filepath.Join(r.dataDir, "sandboxes"))
	if err != nil {
		return nil
	}
	owned := r.owned()
	var out []string
	for _, e := range ents {
		if owned[e.Name()] || importing(e) {
			continue
		}
		if _, err := r.store.GetSandbox(ctx, e.Name()); err != nil && errors.Is(err, store.ErrNotFound) {
			out = append(out, e.Name())
		}
	}
	return out
}

// orphanCandidates lists the instance's cgroups that no live or warm
// sandbox owns.
func (r *reaper) orphanCandidates(ctx context.Context) []string {
	if r.cgroups == nil {
		return nil
	}
	ids, err := r.cgroups.List()
	if err != nil {
		r.log.Error("reaper: list cgroups", "err", err)
		return nil
	}
	owned := r.owned()
	var out []string
	for _, id := range ids {
		if !owned[id] && !r.held.holds(id) && !r.creating(ctx, id) {
			out = append(out, id)
		}
	}
	return out
}

// creating reports whether sandbox id is being created or resumed: its
// cgroup exists before its new VM is registered, and booting a big image
// under TCG can take longer than two rounds; a sandbox paused and resumed
// again and again can be caught resuming by two rounds in a row. (At
// start, recovery has already settled the records a previous hostd left
// creating or resuming.)
func (r *reaper) creating(ctx context.Context, id string) bool {
	rec, err := r.store.GetSandbox(ctx, id)
	return err == nil && (State(rec.State) == StateCreating || State(rec.State) == StateResuming)
}

// ownedIDs are the ids of live and warm sandboxes.
func ownedIDs(reg *registry, ps *poolRegistry) map[string]bool {
	owned := map[string]bool{}
	for _, b := range reg.boxes() {
		owned[b.id] = true
	}
	ps.owned(owned)
	return owned
}

// procLister is implemented by cgroup managers that can list a group's
// processes (*cgroup.Manager).
type procLister interface {
	Procs(id string) ([]int, error)
}

// reapCgroup kills whatever still runs in orphaned group id and removes it,
// unless a sandbox holds the group by now (a create, resume or fork of id
// made it since the round's check: groups.go).
func (r *reaper) reapCgroup(id string) {
	log := r.log.With("sandbox_id", id)
	removed := false
	if !r.held.unheld(id, func() { removed = r.killAndRemove(id, log) }) {
		log.Info("reaper: a sandbox holds the cgroup again; spared it")
		return
	}
	if removed {
		r.reapDir(id)
	}
}

// killAndRemove kills whatever runs in group id and removes the group; it
// reports whether the group is gone.
func (r *reaper) killAndRemove(id string, log *slog.Logger) bool {
	if pl, ok := r.cgroups.(procLister); ok {
		pids, _ := pl.Procs(id)
		for _, pid := range pids {
			log.Warn("reaper: killing orphaned vmm process", "vm_pid", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for i := 0; i < 50 && len(pids) > 0; i++ {
			time.Sleep(20 * time.Millisecond)
			pids, _ = pl.Procs(id)
		}
	}
	if err := r.cgroups.Remove(id); err != nil {
		log.Error("reaper: remove orphaned cgroup", "err", err)
		return false
	}
	log.Warn("reaper: removed orphaned cgroup")
	return true
}

// reapDir removes sandbox id's directory if no record names it.
func (r *reaper) reapDir(id string) {
	if _, err := r.store.GetSandbox(context.Background(), id); err == nil {
		return
	}
	dir := filepath.Join(r.dataDir, "sandboxes", id)
	if _, err := os.Stat(dir); err == nil {
		r.log.Warn("reaper: removing orphaned sandbox dir", "sandbox_id", id)
		r.killVM(id, dir)
		removeDir(dir, r.log)
	}
}

// importing reports whether e is the temporary directory of an import
// from the snapshot store that may still run (portimport.go); one older
// than an hour is a crashed import's, reaped as an orphan.
func importing(e os.DirEntry) bool {
	if !strings.HasPrefix(e.Name(), ".import-") {
		return false
	}
	fi, err := e.Info()
	return err == nil && time.Since(fi.ModTime()) < time.Hour
}
