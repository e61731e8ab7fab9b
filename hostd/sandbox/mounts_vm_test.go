//go:build vm

package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/mounts"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// One boot: a host directory mounted read-only and another read-write, read
// in the sandbox, in each of 3 forks and after a pause and resume; forks
// share the read-write directory (last writer wins); bad mounts are refused
// before anything is made.
func TestHostMounts(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	roots := t.TempDir()
	ro, rw := filepath.Join(roots, "ro"), filepath.Join(roots, "rw")
	for _, d := range []string{ro, rw} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "hello.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, data, func(o *sandbox.Options) { o.Mounts = mounts.Config{HostRoots: []string{roots}} })
	ctx := context.Background()

	checkBadMounts(t, m, ro, data)

	info, err := m.Create(ctx, sandbox.CreateOptions{Mounts: []mounts.Spec{
		{Type: mounts.TypeHost, Source: ro, Path: "/data", ReadOnly: true},
		{Type: mounts.TypeHost, Source: rw, Path: "/work"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	if got := sh(t, m, info.ID, "cat /data/hello.txt"); got != "from the host" {
		t.Fatalf("read in the sandbox: %q", got)
	}
	if got := sh(t, m, info.ID, "echo x > /data/new 2>&1; echo rc=$?"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("write to the read-only mount: %q", got)
	}
	sh(t, m, info.ID, "echo parent > /work/parent.txt")
	if b, _ := os.ReadFile(filepath.Join(rw, "parent.txt")); string(b) != "parent\n" {
		t.Fatalf("host sees %q after the guest's write", b)
	}

	forks, err := m.Fork(ctx, info.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range forks {
		defer m.Delete(ctx, f.ID)
		if got := sh(t, m, f.ID, "cat /data/hello.txt /work/parent.txt"); got != "from the hostparent\n" {
			t.Errorf("fork %d reads %q", i, got)
		}
	}
	// Shared semantics: a fork's write is the host's file, seen by the others.
	sh(t, m, forks[0].ID, "echo fork0 > /work/shared.txt")
	sh(t, m, forks[1].ID, "echo fork1 > /work/shared.txt")
	for _, id := range []string{forks[2].ID, info.ID} {
		if got := sh(t, m, id, "cat /work/shared.txt"); got != "fork1\n" {
			t.Errorf("%s reads %q, want the last writer's", id, got)
		}
	}

	if _, err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "while-paused.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, m, info.ID, "cat /data/hello.txt /data/while-paused.txt"); got != "from the hostnew" {
		t.Errorf("after resume: %q", got)
	}
}

// checkBadMounts: each bad mount is a clear ErrInvalid, and leaves no
// sandbox record or directory.
func checkBadMounts(t *testing.T, m *sandbox.Manager, ok, data string) {
	ctx := context.Background()
	for _, sp := range []mounts.Spec{
		{Type: mounts.TypeHost, Source: "/etc", Path: "/data"},
		{Type: mounts.TypeHost, Source: ok + "/../../etc", Path: "/data"},
		{Type: mounts.TypeHost, Source: ok, Path: "/proc"},
		{Type: mounts.TypeHost, Source: ok, Path: "/sys/x"},
		{Type: mounts.TypeHost, Source: ok, Path: "/dev/x"},
		{Type: mounts.TypeHost, Source: ok, Path: "/run/agent"},
	} {
		_, err := m.Create(ctx, sandbox.CreateOptions{Mounts: []mounts.Spec{sp}})
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("mount %+v: got %v, want ErrInvalid", sp, err)
		}
	}
	if list, _ := m.List(ctx); len(list) != 0 {
		t.Errorf("bad creates left %d sandboxes", len(list))
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "sandboxes")); len(ents) != 0 {
		t.Errorf("bad creates left %d sandbox dirs", len(ents))
	}
}
