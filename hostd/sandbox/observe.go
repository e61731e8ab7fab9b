package sandbox

import (
	"context"
	"time"
)

// Observer receives the manager's operation latencies (hostd/metrics
// implements it).
type Observer interface {
	// Since records that operation op ("create", "restore", "resume",
	// "fork", "exec") started at t0 and has just ended.
	Since(op string, t0 time.Time)
}

type nopObserver struct{}

func (nopObserver) Since(string, time.Time) {}

// VMStats is one running sandbox's VMM cgroup counters.
type VMStats struct {
	ID          string
	CPUSeconds  float64
	MemoryBytes uint64
}

// VMStats reports the cgroup counters of every running sandbox's VMM.
func (m *Manager) VMStats() []VMStats {
	var out []VMStats
	for _, b := range m.reg.boxes() {
		if b.cgroup == nil {
			continue
		}
		if st, err := b.cgroup.Stats(); err == nil {
			out = append(out, VMStats{ID: b.id, CPUSeconds: st.CPUSeconds, MemoryBytes: st.MemoryBytes})
		}
	}
	return out
}

// PoolSizes reports how many warm sandboxes each template's pool holds.
func (m *Manager) PoolSizes() map[string]int {
	return m.pools.sizes()
}

// withLimits adds a sandbox's limits and deadline to info.
func (m *Manager) withLimits(ctx context.Context, info Info) Info {
	info.Limits = m.limits.of(ctx, info.ID)
	info.Deadline = m.Deadline(info.ID)
	return info
}
