package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
)

// A sandbox's TTL (timeout_s) runs from its creation across pauses and
// resumes; when it ends the sandbox is deleted, or paused when its
// on_timeout is "pause". ExtendTimeout sets a new end.

// armTTL starts id's TTL timer to end after d, unless one is running.
func (m *Manager) armTTL(id string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ttls == nil {
		m.ttls = map[string]*ttl{}
	}
	if _, ok := m.ttls[id]; ok || d <= 0 {
		return
	}
	t := &ttl{end: time.Now().Add(d)}
	t.timer = time.AfterFunc(d, func() { m.expire(id) })
	m.ttls[id] = t
}

type ttl struct {
	end   time.Time
	timer *time.Timer
}

// disarmTTL stops id's TTL timer.
func (m *Manager) disarmTTL(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.ttls[id]; ok {
		t.timer.Stop()
		delete(m.ttls, id)
	}
}

// expire ends sandbox id's TTL: delete, or pause.
func (m *Manager) expire(id string) {
	m.mu.Lock()
	delete(m.ttls, id)
	m.mu.Unlock()
	ctx := context.Background()
	m.recordLifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionTimeout, Reason: "timeout reached: " + string(m.limitsOf(ctx, id).OnTimeout)})
	if m.limitsOf(ctx, id).OnTimeout == OnTimeoutPause {
		m.log.Info("sandbox timeout reached; pausing", "sandbox_id", id)
		if _, err := m.Pause(ctx, id); err != nil && !errors.Is(err, ErrNotRunning) && !errors.Is(err, ErrNotFound) {
			m.log.Error("pause expired sandbox", "sandbox_id", id, "err", err)
		}
		return
	}
	m.log.Info("sandbox timeout reached; deleting", "sandbox_id", id)
	if err := m.Delete(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		m.log.Error("delete expired sandbox", "sandbox_id", id, "err", err)
	}
}

// ExtendTimeout makes sandbox id's TTL end timeoutS seconds from now.
func (m *Manager) ExtendTimeout(ctx context.Context, id string, timeoutS int) (Info, error) {
	if timeoutS < 1 {
		return Info{}, fmt.Errorf("%w: timeout_s must be at least 1", ErrInvalid)
	}
	if _, err := m.opts.Store.GetSandbox(ctx, id); err != nil {
		return Info{}, m.notFound(err, id)
	}
	m.disarmTTL(id)
	m.armTTL(id, time.Duration(timeoutS)*time.Second)
	m.recordLifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionTimeout, Reason: fmt.Sprintf("timeout set to %ds from now", timeoutS)})
	return m.Get(ctx, id)
}

// Deadline is when sandbox id's TTL ends (zero without one).
func (m *Manager) Deadline(id string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.ttls[id]; ok {
		return t.end
	}
	return time.Time{}
}

// rearmTTL restarts a paused sandbox's TTL after a hostd restart, from its
// creation (an extension made before the restart is not kept).
func (m *Manager) rearmTTL(r store.Sandbox) {
	if r.TimeoutS <= 0 {
		return
	}
	left := time.Until(r.CreatedAt.Add(time.Duration(r.TimeoutS) * time.Second))
	m.armTTL(r.ID, max(left, time.Second))
}

// stopTTLs stops every TTL timer (at Close).
func (m *Manager) stopTTLs() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, t := range m.ttls {
		t.timer.Stop()
		delete(m.ttls, id)
	}
}
