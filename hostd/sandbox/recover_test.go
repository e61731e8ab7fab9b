package sandbox_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/qemu"
)

// TestRecoverKeepsDisks starts a manager on a data directory that a hostd
// left mid-operation: a sandbox caught resuming (or pausing) with its
// saved state complete is paused again, a running one is failed with its
// files kept until Delete, a half-created one is failed and removed.
func TestRecoverKeepsDisks(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("no qemu-system-x86_64")
	}
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(id, state string, vm *store.SandboxVM) string {
		dir := filepath.Join(data, "sandboxes", id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		overlay := filepath.Join(dir, "disk.qcow2")
		if err := os.WriteFile(overlay, []byte("overlay"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := st.PutSandbox(ctx, store.Sandbox{ID: id, State: state, VCPUs: 1, MemoryMiB: 256, Dir: dir, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if vm != nil {
			vm.ID, vm.Overlay = id, overlay
			if vm.PauseDir != "" {
				vm.PauseDir = filepath.Join(dir, "paused")
				if err := os.MkdirAll(vm.PauseDir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(vm.PauseDir, "memory"), []byte("mem"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.PutSandboxVM(ctx, *vm); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	resuming := put("sb-resuming", "resuming", &store.SandboxVM{PauseDir: "yes"})
	pausing := put("sb-pausing", "pausing", &store.SandboxVM{PauseDir: "yes"})
	halfPaused := put("sb-halfpaused", "pausing", &store.SandboxVM{})
	running := put("sb-running", "running", &store.SandboxVM{})
	creating := put("sb-creating", "creating", nil)

	assets := t.TempDir()
	kernel, base := filepath.Join(assets, "vmlinux"), filepath.Join(assets, "base.qcow2")
	for _, p := range []string{kernel, base} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	d, err := qemu.New(qemu.Options{Accel: vmm.AccelTCG, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	m, err := sandbox.New(sandbox.Options{Driver: d, Store: st, DataDir: data, Kernel: kernel, BaseImage: base, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id    string
		dir   string
		state sandbox.State
		kept  bool
	}{
		{"sb-resuming", resuming, sandbox.StatePaused, true},
		{"sb-pausing", pausing, sandbox.StatePaused, true},
		{"sb-halfpaused", halfPaused, sandbox.StateFailed, true},
		{"sb-running", running, sandbox.StateFailed, true},
		{"sb-creating", creating, sandbox.StateFailed, false},
	} {
		info, err := m.Get(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != c.state {
			t.Errorf("%s: state %s, want %s", c.id, info.State, c.state)
		}
		_, err = os.Stat(filepath.Join(c.dir, "disk.qcow2"))
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: overlay kept %v, want %v", c.id, kept, c.kept)
		}
	}
	if err := m.Delete(ctx, "sb-running"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(running); !os.IsNotExist(err) {
		t.Errorf("a deleted failed sandbox's directory is still there: %v", err)
	}
}
