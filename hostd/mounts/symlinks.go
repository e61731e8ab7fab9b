package mounts

import (
	"io/fs"
	"path"
	"strings"
	"sync"
	"syscall"
)

// A guest's symlinks in a host directory are followed by whatever reads
// that directory on the host (a backup, an indexer, an operator's cp -r),
// not by hostd. So a host mount takes none unless its spec allows them,
// and even then none that is absolute or whose target, resolved lexically
// against the link's directory, leaves the mount (a git mount, the
// sandbox's own clone, always takes those). There is no hard link to make:
// the mount service has no link call, and a rename stays inside the mount.

// maxRenameWalk bounds the entries a directory's rename looks through for
// symlinks it would carry out of the mount; past it the rename is EXDEV
// (mv then copies, and each symlink is made anew, and checked).
const maxRenameWalk = 4096

// linkMu orders the calls that put a symlink at a path (Symlink, Rename)
// in every host mount, so that a rename's check of what it moves is not
// undone by a link made at its source in between, by this sandbox or
// another one mounting the same directory.
var linkMu sync.Mutex

// escapes reports whether a symlink at p (mount-relative, clean) to
// target is absolute or leads, lexically, out of the mount.
func escapes(target, p string) bool {
	if target == "" || path.IsAbs(target) {
		return true
	}
	j := path.Join(path.Dir(p), target)
	return j == ".." || strings.HasPrefix(j, "../")
}

func (h *hostDir) Symlink(target, p string) error {
	if !h.symlinks || escapes(target, p) {
		return &fs.PathError{Op: "symlink", Path: p, Err: syscall.EPERM}
	}
	linkMu.Lock()
	defer linkMu.Unlock()
	return h.root.Symlink(target, p)
}

// Rename refuses to carry a symlink (alone or in a directory) to where its
// target would leave the mount, when it did not already (the operator's).
func (h *hostDir) Rename(from, to string) error {
	linkMu.Lock()
	defer linkMu.Unlock()
	if h.symlinks {
		if err := h.checkMove(from, to); err != nil {
			return err
		}
	}
	return h.root.Rename(from, to)
}

// checkMove checks the symlinks that a rename of from to to moves. Only a
// move to a shallower directory can carry a checked link out.
func (h *hostDir) checkMove(from, to string) error {
	fi, err := h.root.Lstat(from)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		t, err := h.root.Readlink(from)
		if err != nil {
			return err
		}
		if escapes(t, to) && !escapes(t, from) {
			return &fs.PathError{Op: "rename", Path: from, Err: syscall.EPERM}
		}
		return nil
	}
	if !fi.IsDir() || depth(to) >= depth(from) {
		return nil
	}
	seen := 0
	return fs.WalkDir(h.root.FS(), from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if seen++; seen > maxRenameWalk {
			return &fs.PathError{Op: "rename", Path: from, Err: syscall.EXDEV}
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		t, err := h.root.Readlink(p)
		if err != nil {
			return err
		}
		if escapes(t, to+strings.TrimPrefix(p, from)) && !escapes(t, p) {
			return &fs.PathError{Op: "rename", Path: p, Err: syscall.EPERM}
		}
		return nil
	})
}

func depth(p string) int { return strings.Count(p, "/") }
