package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/waitfor"
)

// TestStartReapsUnrecordedVMMAtOnce: a warm-pool member that a killed
// hostd was restoring has a directory but no record, and its VMM may have
// been spawned before its identity was written (fault point vmm:spawned).
// The next hostd's start (ReapOnce) stops that VMM and removes the
// directory at its first sighting, not a reaper round later; a recorded
// sandbox's directory and process are left.
func TestStartReapsUnrecordedVMMAtOnce(t *testing.T) {
	data := t.TempDir()
	st := reapStore(t, data, map[string]State{"sb-live": StateRunning})
	start := func(id string) (*exec.Cmd, chan struct{}) {
		dir := filepath.Join(data, "sandboxes", id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sleep", "600") // stands in for a VMM working in dir
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		return cmd, done
	}
	_, orphanDone := start("sb-pool-orphan")
	_, liveDone := start("sb-live")
	v := &vmmPlacer{log: slog.New(slog.DiscardHandler)}
	r := &reaper{store: st, dataDir: data, log: slog.New(slog.DiscardHandler), held: &cgroupLedger{},
		killVM: v.kill, owned: func() map[string]bool { return map[string]bool{} }}
	r.now(context.Background())

	// The reap waited for the process's exit (its pidfd); Wait reaps it.
	waitfor.Cond(t, "the orphan's unrecorded VMM reaped", func() bool {
		select {
		case <-orphanDone:
			return true
		default:
			return false
		}
	})
	if _, err := os.Stat(filepath.Join(data, "sandboxes", "sb-pool-orphan")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the orphan's directory: %v, want it removed", err)
	}
	select {
	case <-liveDone:
		t.Error("the recorded sandbox's process ended")
	default:
	}
	if _, err := os.Stat(filepath.Join(data, "sandboxes", "sb-live")); err != nil {
		t.Errorf("the recorded sandbox's directory: %v", err)
	}
}
