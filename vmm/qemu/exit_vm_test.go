//go:build vm

package qemu

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// A QEMU that exits at its start (here: a disk, or a disk's backing file,
// that is gone) fails the Start or Restore at once, with ErrNotRunning and
// QEMU's own words naming the file, instead of waiting out the ctx for a
// QMP greeting that never comes (issue 38: "qmp not ready: context deadline
// exceeded" after 2 minutes). The ctx is long, so a regression fails on the
// error's text. QEMU only starts: no guest code runs.
func TestExitAtStartSaysWhy(t *testing.T) {
	a := vmmtest.FindAssets(t)
	d, err := New(Options{Accel: vmm.AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		launch func(ctx context.Context, cfg vmm.Config) (string, error)
	}{
		{"start with a missing disk", func(ctx context.Context, cfg vmm.Config) (string, error) {
			missing := filepath.Join(cfg.Dir, "missing-root.qcow2")
			cfg.Disks = []vmm.Disk{{Path: missing}}
			vm, err := d.Start(ctx, cfg)
			stopIfStarted(vm, err)
			return "missing-root.qcow2", err
		}},
		{"restore over a missing backing file", func(ctx context.Context, cfg vmm.Config) (string, error) {
			base := filepath.Join(cfg.Dir, "gone-base.qcow2")
			if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
				t.Fatalf("qemu-img: %v: %s", err, out)
			}
			overlay := filepath.Join(cfg.Dir, "root.qcow2")
			if err := disk.CreateOverlay(ctx, base, overlay, 0); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(base); err != nil {
				t.Fatal(err)
			}
			snap := t.TempDir()
			if err := writeSnapMeta(snap, snapMetadata{Backend: "qemu", Memory: memStream, MemoryMiB: cfg.MemoryMiB, VCPUs: cfg.VCPUs}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(snap, snapState), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			cfg.Disks = []vmm.Disk{{Path: overlay}}
			vm, err := d.Restore(ctx, cfg, snap)
			stopIfStarted(vm, err)
			return "gone-base.qcow2", err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			dir := vmmtest.ShortTempDir(t)
			cfg := vmm.Config{ID: "exits", Dir: dir, Kernel: a.Kernel, Initramfs: a.Initramfs, VCPUs: 1, MemoryMiB: 128,
				ConsoleLog: filepath.Join(dir, "console.log")}
			file, err := tc.launch(ctx, cfg)
			if err == nil {
				t.Fatal("the launch succeeded, want an error")
			}
			if !errors.Is(err, vmm.ErrNotRunning) || !strings.Contains(err.Error(), file) {
				t.Errorf("got %v, want ErrNotRunning and QEMU's words naming %s", err, file)
			}
		})
	}
}

func stopIfStarted(vm vmm.VM, err error) {
	if err == nil {
		_ = vm.Stop(context.Background())
	}
}
