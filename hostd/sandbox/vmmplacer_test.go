package sandbox

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/vmm"
)

// sandboxDir returns a fresh directory as /proc shows a process's cwd in
// it (symlinks resolved).
func sandboxDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// startSleep starts `sleep 600` working in dir and returns it and its
// identity. The process is killed (by its pid) and reaped when the test
// ends.
func startSleep(t *testing.T, dir string) (*exec.Cmd, vmm.Process) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if cmd.ProcessState == nil {
			_ = cmd.Wait()
		}
	})
	p, err := vmm.Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, p
}

// TestUnrecordedIn: the processes found in a sandbox directory are those
// working there, and only those.
func TestUnrecordedIn(t *testing.T) {
	dir := sandboxDir(t)
	_, in := startSleep(t, dir)
	startSleep(t, sandboxDir(t))
	if got := unrecordedIn(dir); !slices.Equal(got, []vmm.Process{in}) {
		t.Errorf("unrecordedIn: got %v, want only %v", got, in)
	}
	if got := unrecordedIn(sandboxDir(t)); len(got) != 0 {
		t.Errorf("unrecordedIn of a directory no process works in: got %v, want none", got)
	}
}

// TestVMMsKill: kill stops the VMM recorded in the sandbox directory (which
// works elsewhere) and the process working in the directory that no record
// names, removes the record, and leaves every other process running.
func TestVMMsKill(t *testing.T) {
	v := &vmmPlacer{backend: "fake", log: slog.New(slog.DiscardHandler)}
	dir := sandboxDir(t)
	elsewhere := sandboxDir(t)
	recordedCmd, recorded := startSleep(t, elsewhere)
	if err := writeVMState(dir, vmState{Backend: "fake", Process: recorded}); err != nil {
		t.Fatal(err)
	}
	unrecordedCmd, unrecorded := startSleep(t, dir)
	_, bystander := startSleep(t, elsewhere)

	v.kill("sb-kill", dir)
	if recorded.Alive() {
		t.Errorf("the recorded vmm %v still runs after kill", recorded)
	}
	if unrecorded.Alive() {
		t.Errorf("the unrecorded process %v working in the sandbox dir still runs after kill", unrecorded)
	}
	if !bystander.Alive() {
		t.Errorf("the process %v working elsewhere was stopped", bystander)
	}
	if _, err := os.Stat(filepath.Join(dir, vmStateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after kill: got %v, want it removed", vmStateFile, err)
	}
	if t.Failed() {
		return // a Wait below could block: the cleanup kills them
	}
	// Both ended (zombies until now) of the SIGKILL.
	for _, cmd := range []*exec.Cmd{recordedCmd, unrecordedCmd} {
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("pid %d: got %v, want killed by SIGKILL", cmd.Process.Pid, cmd.ProcessState)
		}
	}
}
