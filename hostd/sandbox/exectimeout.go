package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// execTimeouts kills execs whose timeout passed. Its timers live in the
// sandboxes' entries (entry.kills), so that a pause or a new VM does not
// lose them.
type execTimeouts struct {
	reg   *registry
	log   *slog.Logger
	spawn func(func()) bool
}

// arm kills exec execID of sandbox id once its timeout d (the
// request's, or the sandbox's exec_timeout_s) passes, whether or not a
// client still follows it (killing a session that has exited does
// nothing); d <= 0: never. The timer belongs to the sandbox's entry, not to
// this VM: a kill that falls due while the sandbox is paused is sent when
// it runs again. The start event records the timeout, for a next hostd to
// arm again (readoptExecs).
func (t *execTimeouts) arm(id, execID string, d time.Duration) {
	if d <= 0 {
		return
	}
	e := t.reg.get(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kills == nil {
		e.kills = map[string]*time.Timer{}
	}
	e.kills[execID] = time.AfterFunc(d, func() {
		t.spawn(func() { t.kill(id, execID) })
	})
}

// kill sends SIGKILL to exec execID of sandbox id through its current
// VM's agent, or marks it due while the sandbox does not run.
func (t *execTimeouts) kill(id, execID string) {
	e := t.reg.find(id)
	if e == nil {
		return // deleted
	}
	e.mu.Lock()
	delete(e.kills, execID)
	b := e.box
	if b == nil {
		e.dueKills = append(e.dueKills, execID)
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	t.log.Info("exec timeout reached; killing", "sandbox_id", id, "exec_id", execID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := b.client(ctx)
	if err == nil {
		err = c.Signal(ctx, execID, syscall.SIGKILL)
	}
	if err != nil && !errors.Is(err, agentclient.ErrNoSession) {
		t.log.Warn("exec timeout: kill", "sandbox_id", id, "exec_id", execID, "err", err)
	}
}
