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

// TestOverlayOfANewBase checks that an overlay of a base never seen before,
// made from a cached overlay of another base of the same size (rebase), is
// byte for byte what qemu-img makes, for backing names shorter and longer.
func TestOverlayOfANewBase(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mkBase := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := qemuImg(ctx, "create", "-q", "-f", "qcow2", p, "96M"); err != nil {
			t.Fatalf("qemu-img unusable: %v", err)
		}
		return p
	}
	first := mkBase("sn-first/disk.qcow2")
	if err := CreateOverlay(ctx, first, filepath.Join(dir, "first.qcow2"), 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b/d.qcow2", "sn-second/disk.qcow2", "a-much-longer-directory-name/and/deeper/still/disk.qcow2"} {
		t.Run(name, func(t *testing.T) {
			base := mkBase(name)
			got := filepath.Join(dir, "got-"+filepath.Base(filepath.Dir(name))+".qcow2")
			path := os.Getenv("PATH")
			os.Setenv("PATH", "") // made without qemu-img
			err := CreateOverlay(ctx, base, got, 0)
			os.Setenv("PATH", path)
			if err != nil {
				t.Fatal(err)
			}
			want := got + ".want"
			if _, err := qemuImg(ctx, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, "-o", "cluster_size=65536", want); err != nil {
				t.Fatal(err)
			}
			g, _ := os.ReadFile(got)
			w, _ := os.ReadFile(want)
			if !bytes.Equal(g, w) {
				t.Errorf("the overlay of %s differs from qemu-img's (%d and %d bytes)", name, len(g), len(w))
			}
			if _, err := qemuImg(ctx, "check", "-q", got); err != nil {
				t.Errorf("qemu-img check: %v", err)
			}
		})
	}
}

func TestRebaseRefusesOtherLayouts(t *testing.T) {
	cases := map[string][]byte{
		"not qcow2":  bytes.Repeat([]byte{1}, 4096),
		"too short":  []byte("QFI\xfb"),
		"no backing": append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 1<<16)...),
	}
	for name, b := range cases {
		if _, err := rebase(b, "/x"); err == nil {
			t.Errorf("%s: rebase accepted it", name)
		}
	}
}
