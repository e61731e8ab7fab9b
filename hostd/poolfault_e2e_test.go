//go:build vm

package hostd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestPoolRefillKilledAtSpawn: hostd is killed (fault point vmm:spawned)
// while its start refills the base snapshot's warm pool, after the
// refill's VMM was spawned and before its identity was written. That VMM
// works in a directory that no record names; the next hostd stops it at
// its start (before it serves), not a reaper round later, and removes the
// directory.
func TestPoolRefillKilledAtSpawn(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	netDataDirsMu.Lock()
	netDataDirs = append(netDataDirs, data)
	netDataDirsMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(func() { // after every child's
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(data, "child-hostd.log"))
			t.Logf("child hostd log:\n%s", b)
		}
	})

	// A create of the default shape makes the base snapshot, whose pool
	// every later start refills.
	h1 := startChild(t, data, "")
	sb, err := h1.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	killVMAtEnd(t, vmOf(t, data, sb.ID))
	h1.kill()

	h2 := spawnChild(t, data, "vmm:spawned")
	if err := h2.wait(); err == nil {
		t.Fatal("hostd exited cleanly instead of at vmm:spawned")
	}
	orphans := unrecordedVMMs(t, data)
	if len(orphans) == 0 {
		t.Fatal("no unrecorded VMM after hostd was killed at vmm:spawned")
	}
	for dir, p := range orphans {
		killVMAtEnd(t, p)
		t.Logf("unrecorded VMM pid %d in %s", p.PID, filepath.Base(dir))
	}

	h3 := startChild(t, data, "")
	for dir, p := range orphans {
		if p.Alive() {
			t.Errorf("the unrecorded VMM (pid %d) of the killed refill runs on after the next hostd started", p.PID)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed refill's directory %s: %v, want it removed", dir, err)
		}
	}
	if got, err := h3.c.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" {
		t.Errorf("the recorded sandbox after the restarts: %+v, %v; want running", got, err)
	}
	// Stop cleanly: the sandbox deleted, the pool ended by SIGTERM.
	if err := h3.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Error(err)
	}
	_ = h3.cmd.Process.Signal(syscall.SIGTERM)
	_ = h3.wait()
}

// unrecordedVMMs returns, by sandbox directory, the processes working in a
// directory under data/sandboxes (their cwd or root) that the directory's
// vmm.json does not name.
func unrecordedVMMs(t *testing.T, data string) map[string]vmm.Process {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(data, "sandboxes", "*"))
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]vmm.Process{}
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, _ := os.Readlink("/proc/" + e.Name() + "/cwd")
		root, _ := os.Readlink("/proc/" + e.Name() + "/root")
		for _, d := range dirs {
			if cwd != d && root != d {
				continue
			}
			if _, err := os.Stat(filepath.Join(d, "vmm.json")); err == nil && vmOf(t, data, filepath.Base(d)).PID == pid {
				continue
			}
			if p, err := vmm.Identify(pid); err == nil {
				out[d] = p
			}
		}
	}
	return out
}
