package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
)

// A sandbox's TTL (timeout_s) runs from its creation across pauses and
// resumes; when it ends the sandbox is deleted, or paused when its
// on_timeout is "pause". ExtendTimeout sets a new end. The timer is the
// entry's (registry.go).

// ttls arms the sandboxes' TTL timers and ends the sandboxes whose TTL
// ends, with the manager's pause or delete.
type ttls struct {
	reg       *registry
	rec       *recorderFeed
	log       *slog.Logger
	spawn     func(func()) bool
	onTimeout func(ctx context.Context, id string) string // the sandbox's on_timeout
	pause     func(ctx context.Context, id string) (Info, error)
	del       func(ctx context.Context, id string) error
}

// arm starts e's TTL timer to end after d, unless one is running.
func (t *ttls) arm(e *entry, d time.Duration) {
	e.ttl.arm(d, func() { t.spawn(func() { t.expire(e.id) }) })
}

// expire ends sandbox id's TTL: delete, or pause.
func (t *ttls) expire(id string) {
	ctx := context.Background()
	onTimeout := t.onTimeout(ctx, id)
	t.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionTimeout, Reason: "timeout reached: " + onTimeout})
	if onTimeout == OnTimeoutPause {
		t.log.Info("sandbox timeout reached; pausing", "sandbox_id", id)
		if _, err := t.pause(ctx, id); err != nil && !errors.Is(err, ErrNotRunning) && !errors.Is(err, ErrNotFound) {
			t.log.Error("pause expired sandbox", "sandbox_id", id, "err", err)
		}
		return
	}
	t.log.Info("sandbox timeout reached; deleting", "sandbox_id", id)
	if err := t.del(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		t.log.Error("delete expired sandbox", "sandbox_id", id, "err", err)
	}
}

// MaxTimeoutS is the longest timeout_s that ExtendTimeout takes (a year).
const MaxTimeoutS = 366 * 24 * 3600

// ExtendTimeout makes sandbox id's TTL end timeoutS seconds from now.
func (m *Manager) ExtendTimeout(ctx context.Context, id string, timeoutS int) (Info, error) {
	if timeoutS < 1 || timeoutS > MaxTimeoutS {
		return Info{}, fmt.Errorf("%w: timeout_s must be 1..%d", ErrInvalid, MaxTimeoutS)
	}
	if _, err := m.opts.Store.GetSandbox(ctx, id); err != nil {
		return Info{}, notFound(err, id)
	}
	e := m.reg.get(id)
	e.ttl.disarm()
	m.ttls.arm(e, time.Duration(timeoutS)*time.Second)
	m.rec.lifecycle(ctx, id, recorder.LifecycleData{Action: recorder.ActionTimeout, Reason: fmt.Sprintf("timeout set to %ds from now", timeoutS)})
	return m.Get(ctx, id)
}

// Deadline is when sandbox id's TTL ends (zero without one).
func (m *Manager) Deadline(id string) time.Time {
	if e := m.reg.find(id); e != nil {
		return e.ttl.deadline()
	}
	return time.Time{}
}

// rearm restarts a paused sandbox's TTL after a hostd restart, from its
// creation (an extension made before the restart is not kept).
func (t *ttls) rearm(r store.Sandbox) {
	if r.TimeoutS <= 0 {
		return
	}
	left := time.Until(r.CreatedAt.Add(time.Duration(r.TimeoutS) * time.Second))
	t.arm(t.reg.get(r.ID), max(left, time.Second))
}
