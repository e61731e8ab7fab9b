package disk

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestCreateOverlay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	if _, err := qemuImg(ctx, "create", "-q", "-f", "qcow2", base, "64M"); err != nil {
		t.Fatalf("qemu-img unusable: %v", err)
	}
	tests := []struct {
		name string
		size int64
		want int64
	}{
		{"base size", 0, 64 << 20},
		{"grown", 128 << 20, 128 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ov := filepath.Join(dir, tc.name+".qcow2")
			if err := CreateOverlay(ctx, base, ov, tc.size); err != nil {
				t.Fatal(err)
			}
			info, err := Inspect(ctx, ov)
			if err != nil {
				t.Fatal(err)
			}
			if info.Format != "qcow2" || info.VirtualSize != tc.want || info.BackingFilename != base {
				t.Errorf("got %+v, want qcow2 of %d backed by %s", info, tc.want, base)
			}
		})
	}
	t.Run("a second overlay of a base is a copy, and sound", func(t *testing.T) {
		first, second := filepath.Join(dir, "base size.qcow2"), filepath.Join(dir, "second.qcow2") // first: qemu-img's
		if err := CreateOverlay(ctx, base, second, 0); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(first)
		b, _ := os.ReadFile(second)
		if !bytes.Equal(a, b) {
			t.Error("the copied overlay differs from qemu-img's")
		}
		if _, err := qemuImg(ctx, "check", "-q", second); err != nil {
			t.Errorf("qemu-img check of the copy: %v", err)
		}
		if err := CreateOverlay(ctx, base, second, 0); err == nil {
			t.Error("an overlay over an existing file: got nil error")
		}
	})
	if err := CreateOverlay(ctx, filepath.Join(dir, "missing"), filepath.Join(dir, "x"), 0); err == nil {
		t.Error("got nil error for a missing base")
	}
}
