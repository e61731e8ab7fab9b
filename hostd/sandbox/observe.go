package sandbox

import (
	"context"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
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
	m.mu.Lock()
	boxes := make([]*box, 0, len(m.boxes))
	for _, b := range m.boxes {
		boxes = append(boxes, b)
	}
	m.mu.Unlock()
	var out []VMStats
	for _, b := range boxes {
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
	m.mu.Lock()
	pools := make(map[string]*pool, len(m.pools))
	for n, p := range m.pools {
		pools[n] = p
	}
	m.mu.Unlock()
	out := make(map[string]int, len(pools))
	for n, p := range pools {
		p.mu.Lock()
		out[n] = len(p.ready)
		p.mu.Unlock()
	}
	return out
}

// withLimits adds a sandbox's limits and deadline to info.
func (m *Manager) withLimits(ctx context.Context, info Info) Info {
	info.Limits = m.limitsOf(ctx, info.ID)
	info.Deadline = m.Deadline(info.ID)
	return info
}

// execDeadline kills exec execID's process group once its timeout (or the
// sandbox's exec_timeout_s) passes, whether or not a client still follows
// it (killing a session that has exited does nothing).
func (m *Manager) execDeadline(b *box, c *agentclient.Client, execID string, timeoutS int) {
	if timeoutS == 0 {
		timeoutS = b.limits.ExecTimeoutS
	}
	if timeoutS <= 0 {
		return
	}
	time.AfterFunc(time.Duration(timeoutS)*time.Second, func() {
		m.log.Info("exec timeout reached; killing", "sandbox_id", b.id, "exec_id", execID, "timeout_s", timeoutS)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Signal(ctx, execID, syscall.SIGKILL)
	})
}
