package disk

import (
	"context"
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
	if err := CreateOverlay(ctx, filepath.Join(dir, "missing"), filepath.Join(dir, "x"), 0); err == nil {
		t.Error("got nil error for a missing base")
	}
}
