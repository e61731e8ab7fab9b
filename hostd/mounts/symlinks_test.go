package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestSymlinkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, target, path string
		allow, wantOK      bool
	}{
		{"off: relative inside", "a", "l", false, false},
		{"absolute", "/etc/passwd", "l", true, false},
		{"up out", "../../etc", "d/l", true, false},
		{"up out from the root", "..", "l", true, false},
		{"down and out", "d/../../x", "l", true, false},
		{"empty", "", "l", true, false},
		{"relative inside", "f", "l", true, true},
		{"up, still inside", "../f", "d/l", true, true},
		{"dot", ".", "d/l", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostDirT(t, tc.allow)
			if err := h.root.Mkdir("d", 0o755); err != nil {
				t.Fatal(err)
			}
			err := h.Symlink(tc.target, tc.path)
			if tc.wantOK && err != nil {
				t.Errorf("Symlink(%q, %q): got %v, want it made", tc.target, tc.path, err)
			}
			if !tc.wantOK && !errors.Is(err, syscall.EPERM) {
				t.Errorf("Symlink(%q, %q): got %v, want EPERM", tc.target, tc.path, err)
			}
			if _, lerr := h.root.Lstat(tc.path); (lerr == nil) != tc.wantOK {
				t.Errorf("Lstat after: %v", lerr)
			}
		})
	}
}

// TestRenameKeepsSymlinksInside: a rename may not carry a link, alone or in
// a directory, to where it leads out; a link the operator made that leads
// out already may move.
func TestRenameKeepsSymlinksInside(t *testing.T) {
	h := newHostDirT(t, true)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.root.MkdirAll("a/b/c", 0o755))
	must(h.Symlink("../../f", "a/b/l"))      // a/b/../../f = f
	must(h.Symlink("../../../f", "a/b/c/l")) // = f
	for _, tc := range []struct{ from, to string }{
		{"a/b/l", "l"},   // ../../f from the root
		{"a/b", "b"},     // b/c/l: ../../../f from b/c
		{"a/b/c", "a/c"}, // a/c/l: ../../../f from a/c
	} {
		if err := h.Rename(tc.from, tc.to); !errors.Is(err, syscall.EPERM) {
			t.Errorf("Rename(%q, %q): got %v, want EPERM", tc.from, tc.to, err)
		}
	}
	must(h.root.MkdirAll("x/y/z", 0o755))
	must(h.Rename("a/b/l", "x/y/l")) // as deep: still f
	must(h.Rename("a", "x/y/z/a"))   // deeper: inside still
	must(os.Symlink("/etc", filepath.Join(h.root.Name(), "op")))
	must(h.Rename("op", "x/op"))
	if err := h.Rename("x/y/z/a/b/c", "c"); !errors.Is(err, syscall.EPERM) {
		t.Errorf("a shallower move of a directory with a link: got %v, want EPERM", err)
	}
}

func newHostDirT(t *testing.T, symlinks bool) *hostDir {
	t.Helper()
	h, err := openHostDir(t.TempDir(), symlinks, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
