package mounts

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/waitfor"
)

// A listing with attributes (ls -l) is a few batched ReadDir calls, not a
// lookup per entry; the entries' attributes are the host's.
func TestFUSEListingBatched(t *testing.T) {
	src := t.TempDir()
	const n = 5000
	for i := range n {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%05d", i)), bytes.Repeat([]byte("x"), i%7), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mnt := filepath.Join(t.TempDir(), "m")
	h := newHarness(t, []Spec{{Type: TypeHost, Source: src, Path: mnt}})
	h.connect()
	before := ReadStats()
	des, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != n {
		t.Fatalf("listed %d entries, want %d", len(des), n)
	}
	for i, de := range des {
		fi, err := os.Lstat(filepath.Join(mnt, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(i%7) || !fi.Mode().IsRegular() {
			t.Fatalf("%s: size %d mode %v, want %d, a file", de.Name(), fi.Size(), fi.Mode(), i%7)
		}
	}
	got := ReadStats().Sub(before)
	t.Logf("calls: %v", got.Calls)
	if got.Calls["ReadDir"] > 3 || got.Calls["Lstat"] > 10 {
		t.Errorf("ls -l of %d entries made %d ReadDir and %d Lstat calls, want a few of each", n, got.Calls["ReadDir"], got.Calls["Lstat"])
	}
}

// A read-write mount shows a change made on the host (by a fork, an
// operator) once the guest's cache of it expires; a read-only mount caches
// the data it read across opens, and still shows new files at once.
func TestFUSECacheSemantics(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	gdir := t.TempDir()
	rw, ro := filepath.Join(gdir, "rw"), filepath.Join(gdir, "ro")
	h := newHarness(t, []Spec{{Type: TypeHost, Source: src, Path: rw}, {Type: TypeHost, Source: src, Path: ro, ReadOnly: true}})
	h.connect()
	for _, m := range []string{rw, ro} {
		if b, err := os.ReadFile(filepath.Join(m, "f")); err != nil || string(b) != "one" {
			t.Fatalf("read %s: %q, %v", m, b, err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("second"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the read-write mount shows the host's change", func() bool {
		b, err := os.ReadFile(filepath.Join(rw, "f"))
		return err == nil && string(b) == "second"
	})
	// The guest's own writes are seen at once, whatever it cached.
	if err := os.WriteFile(filepath.Join(rw, "f"), []byte("from the guest"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "f")); err != nil || string(b) != "from the guest" {
		t.Fatalf("read back the guest's write: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "f")); string(b) != "from the guest" {
		t.Fatalf("the host holds %q after the guest's write", b)
	}
	// No name's absence is cached: a new host file shows at once.
	if _, err := os.Stat(filepath.Join(ro, "new")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing file: %v", err)
	}
	if err := os.WriteFile(filepath.Join(src, "new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{rw, ro} {
		if b, err := os.ReadFile(filepath.Join(m, "new")); err != nil || string(b) != "n" {
			t.Errorf("a new host file in %s: %q, %v", m, b, err)
		}
	}
}
