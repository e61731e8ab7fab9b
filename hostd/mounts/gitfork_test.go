package mounts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// TestGitForkShares forks a clone with linkTree and writes through both
// sides' backends (as their guests would): every kind of write stays on
// its own side, both ways, and what neither wrote is the same in both.
func TestGitForkShares(t *testing.T) {
	parent, fork := t.TempDir(), t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(parent, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(parent, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "sub/f.txt"} {
		write(f, "orig "+f)
	}
	if err := os.Symlink("a.txt", filepath.Join(parent, "link")); err != nil {
		t.Fatal(err)
	}
	if err := linkTree(context.Background(), parent, fork); err != nil {
		t.Fatal(err)
	}
	hp, err := openHostDir(parent, true, true)
	if err != nil {
		t.Fatal(err)
	}
	defer hp.Close()
	hf, err := openHostDir(fork, true, true)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()

	mustWrite := func(h *hostDir, p, s string) {
		t.Helper()
		if _, err := h.WriteAt(p, []byte(s), 0); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	mustWrite(hf, "a.txt", "FORK")       // a fork's write
	mustWrite(hp, "b.txt", "PARENT")     // the parent's
	mustWrite(hf, "sub/f.txt", "FORK f") // in a subdirectory
	size := uint64(2)
	if err := hf.SetAttr("c.txt", &agentv1.MountSetAttrRequest{Size: &size}); err != nil { // a truncate
		t.Fatal(err)
	}
	mode := uint32(0o600)
	if err := hp.SetAttr("d.txt", &agentv1.MountSetAttrRequest{Mode: &mode}); err != nil { // a chmod
		t.Fatal(err)
	}
	mt := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	if err := hf.SetAttr("e.txt", &agentv1.MountSetAttrRequest{MtimeNs: &mt}); err != nil {
		t.Fatal(err)
	}

	check := func(dir, p, want string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(b) != want {
			t.Errorf("%s/%s = %q (%v), want %q", filepath.Base(dir), p, b, err, want)
		}
	}
	check(parent, "a.txt", "orig a.txt")
	check(fork, "a.txt", "FORK a.txt") // WriteAt at 0 overwrites 4 bytes
	check(parent, "b.txt", "PARENT.txt")
	check(fork, "b.txt", "orig b.txt")
	check(parent, "sub/f.txt", "orig sub/f.txt")
	check(fork, "sub/f.txt", "FORK fub/f.txt")
	check(parent, "c.txt", "orig c.txt")
	check(fork, "c.txt", "or")
	check(fork, "link", "FORK a.txt")
	if fi, _ := os.Stat(filepath.Join(fork, "d.txt")); fi.Mode().Perm() != 0o644 {
		t.Errorf("the parent's chmod reached the fork: %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(parent, "e.txt")); fi.ModTime().UnixNano() == mt {
		t.Errorf("the fork's utimes reached the parent")
	}
	// A write after the break stays on its side too, and lists no
	// leftover temporary file.
	mustWrite(hp, "a.txt", "P2")
	check(fork, "a.txt", "FORK a.txt")
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		if len(e.Name()) > 13 && e.Name()[:13] == ".agentbox-cow" {
			t.Errorf("left a temporary file %s", e.Name())
		}
	}
	if a, _ := hf.Lstat("b.txt"); a.Nlink != 1 {
		t.Errorf("guest sees nlink %d for a shared file, want 1", a.Nlink)
	}
}

// BenchmarkGitFork reports the cost of a fork's git mount: sharing a
// clone of 2,000 files of 64 KiB (125 MiB).
func BenchmarkGitFork(b *testing.B) {
	src := b.TempDir()
	buf := make([]byte, 64<<10)
	for i := range 2000 {
		d := filepath.Join(src, fmt.Sprintf("d%02d", i%40))
		os.MkdirAll(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; b.Loop(); i++ {
		dst := filepath.Join(b.TempDir(), "fork")
		os.Mkdir(dst, 0o755)
		if err := linkTree(context.Background(), src, dst); err != nil {
			b.Fatal(err)
		}
	}
}
