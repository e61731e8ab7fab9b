package sandbox

import (
	"log/slog"
	"testing"
	"time"
)

// TestExecTimeoutDisarmedAtExit: an exec's timeout timer goes when the exec
// exits, and another exec's stays.
func TestExecTimeoutDisarmedAtExit(t *testing.T) {
	var reg registry
	to := &execTimeouts{reg: &reg, log: slog.New(slog.DiscardHandler), spawn: func(f func()) bool { go f(); return true }}
	to.arm("sb-1", "x-1", time.Hour)
	to.arm("sb-1", "x-2", time.Hour)
	e := reg.get("sb-1")
	t.Cleanup(e.stopTimers)
	e.disarmKill("x-1")
	e.disarmKill("x-unknown")
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.kills["x-1"]; ok || len(e.kills) != 1 || e.kills["x-2"] == nil {
		t.Errorf("timers after x-1 exited: %v, want x-2's alone", e.kills)
	}
}
