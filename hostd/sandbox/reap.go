package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/hostd/store"
)

// DefaultReapInterval is how often the reaper looks for orphans.
const DefaultReapInterval = time.Minute

// Reap runs the reaper until ctx ends: every interval it removes what no
// sandbox owns any more (see ReapOnce).
func (m *Manager) Reap(ctx context.Context, interval time.Duration) {
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
		suspects = m.reapOnce(ctx, suspects)
		m.pruneEvents(ctx)
	}
}

// pruneEvents drops flight-recorder events older than EventRetention.
func (m *Manager) pruneEvents(ctx context.Context) {
	if m.opts.Recorder == nil || m.opts.EventRetention <= 0 {
		return
	}
	n, err := m.opts.Recorder.Prune(ctx, time.Now().Add(-m.opts.EventRetention))
	if err != nil {
		m.log.Error("prune events", "err", err)
	} else if n > 0 {
		m.log.Info("pruned old events", "count", n, "retention", m.opts.EventRetention)
	}
}

// ReapOnce removes, at once, the instance's cgroups (and any process still
// in them) and sandbox directories that no sandbox owns. Run at start,
// before any sandbox exists.
func (m *Manager) ReapOnce(ctx context.Context) {
	all := map[string]bool{}
	for _, id := range m.orphanCandidates(ctx) {
		all[id] = true
	}
	m.reapOnce(ctx, all)
}

// reapOnce removes the orphans that were already suspects in the previous
// round (so a sandbox being created, whose cgroup exists before it is
// registered, is never taken), and returns this round's suspects.
func (m *Manager) reapOnce(ctx context.Context, suspects map[string]bool) map[string]bool {
	next := map[string]bool{}
	for _, id := range m.orphanCandidates(ctx) {
		if !suspects[id] {
			next[id] = true
			continue
		}
		m.reapCgroup(id)
	}
	for _, id := range m.orphanDirs(ctx) {
		if !suspects["dir:"+id] {
			next["dir:"+id] = true
			continue
		}
		m.reapDir(id)
	}
	return next
}

// orphanDirs lists sandbox directories that no record and no live or warm
// sandbox owns.
func (m *Manager) orphanDirs(ctx context.Context) []string {
	ents, err := os.ReadDir(filepath.Join(m.opts.DataDir, "sandboxes"))
	if err != nil {
		return nil
	}
	owned := m.ownedIDs()
	var out []string
	for _, e := range ents {
		if owned[e.Name()] {
			continue
		}
		if _, err := m.opts.Store.GetSandbox(ctx, e.Name()); err != nil && errors.Is(err, store.ErrNotFound) {
			out = append(out, e.Name())
		}
	}
	return out
}

// orphanCandidates lists the instance's cgroups that no live or warm
// sandbox owns.
func (m *Manager) orphanCandidates(ctx context.Context) []string {
	if m.opts.Cgroups == nil {
		return nil
	}
	ids, err := m.opts.Cgroups.List()
	if err != nil {
		m.log.Error("reaper: list cgroups", "err", err)
		return nil
	}
	owned := m.ownedIDs()
	var out []string
	for _, id := range ids {
		if !owned[id] {
			out = append(out, id)
		}
	}
	return out
}

// ownedIDs are the ids of live and warm sandboxes.
func (m *Manager) ownedIDs() map[string]bool {
	owned := map[string]bool{}
	for _, b := range m.reg.boxes() {
		owned[b.id] = true
	}
	m.pools.owned(owned)
	return owned
}

// procLister is implemented by cgroup managers that can list a group's
// processes (*cgroup.Manager).
type procLister interface {
	Procs(id string) ([]int, error)
}

// reapCgroup kills whatever still runs in orphaned group id and removes it.
func (m *Manager) reapCgroup(id string) {
	log := m.log.With("sandbox_id", id)
	if pl, ok := m.opts.Cgroups.(procLister); ok {
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
	if err := m.opts.Cgroups.Remove(id); err != nil {
		log.Error("reaper: remove orphaned cgroup", "err", err)
		return
	}
	log.Warn("reaper: removed orphaned cgroup")
	m.reapDir(id)
}

// reapDir removes sandbox id's directory if no record names it.
func (m *Manager) reapDir(id string) {
	if _, err := m.opts.Store.GetSandbox(context.Background(), id); err == nil {
		return
	}
	dir := filepath.Join(m.opts.DataDir, "sandboxes", id)
	if _, err := os.Stat(dir); err == nil {
		m.log.Warn("reaper: removing orphaned sandbox dir", "sandbox_id", id)
		removeDir(dir, m.log)
	}
}
