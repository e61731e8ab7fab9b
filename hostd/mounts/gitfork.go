package mounts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A fork's git mount shares its parent's clone instead of copying it:
// linkTree makes the fork's tree with a reflink of each file where the
// filesystem has them (btrfs, XFS: copy-on-write by the filesystem) and a
// hard link where it has not (ext4). A hard-linked file is shared until
// either side writes it: every write to a clone goes through a hostDir
// with cow set, which first gives the file its own copy (breakLink), so a
// write in the fork never changes the parent, nor the parent's the fork.
// Only hostd writes the clones (no link(2) reaches the guest), so a file
// with more than one link is one that a fork shares.

// cowMu orders link breaking against writes: a write holds it for reading
// from its link check to its end, a break and a fork's linkTree for
// writing. So no write lands in a file while it is being linked into a
// fork or copied out of its links, and a file's link count read under it
// stays true until the write is done.
var cowMu sync.RWMutex

// linkTree makes dst (an empty directory) a copy of src that shares src's
// file contents. Directories, symlinks and modes are copied; regular files
// are reflinked, else hard-linked; other files are skipped (a clone holds
// none).
func linkTree(ctx context.Context, src, dst string) error {
	cowMu.Lock()
	defer cowMu.Unlock()
	reflink := true
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if rel != "." {
				if err := os.Mkdir(to, fi.Mode().Perm()); err != nil {
					return err
				}
			}
			return os.Chmod(to, fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetgid|fs.ModeSetuid))
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(t, to)
		case d.Type().IsRegular():
			if reflink {
				err := cloneFile(p, to, fi)
				if err == nil {
					return nil
				}
				if !errors.Is(err, errNoReflink) {
					return err
				}
				reflink = false // the filesystem has none: link the rest
			}
			return os.Link(p, to)
		}
		return nil
	})
}

// errNoReflink is a filesystem without FICLONE between src and dst.
var errNoReflink = errors.New("mounts: no reflinks here")

// cloneFile reflinks src to a new file dst with src's mode and times.
func cloneFile(src, dst string, fi fs.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	cerr := unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	err = errors.Join(cerr, out.Close())
	if cerr != nil {
		os.Remove(dst)
		if errors.Is(cerr, unix.EOPNOTSUPP) || errors.Is(cerr, unix.EXDEV) || errors.Is(cerr, unix.EINVAL) || errors.Is(cerr, unix.ENOTTY) {
			return errNoReflink
		}
		return fmt.Errorf("mounts: reflink %s: %w", src, cerr)
	}
	if err != nil {
		return err
	}
	return errors.Join(os.Chmod(dst, fi.Mode()&fs.ModePerm|fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)),
		os.Chtimes(dst, fi.ModTime(), fi.ModTime()))
}

// forWrite runs fn with p given a file of its own first (when h is a
// clone's and p is shared with a fork), under cowMu held for reading.
func (h *hostDir) forWrite(p string, fn func() error) error {
	if !h.cow {
		return fn()
	}
	for range 3 {
		cowMu.RLock()
		shared, err := h.shared(p)
		if err != nil || !shared {
			defer cowMu.RUnlock()
			if err != nil {
				return err
			}
			return fn()
		}
		cowMu.RUnlock()
		cowMu.Lock()
		err = h.breakLink(p)
		cowMu.Unlock()
		if err != nil {
			return err
		}
	}
	return &fs.PathError{Op: "write", Path: p, Err: syscall.EAGAIN}
}

// shared reports whether p is a regular file with more than one link.
func (h *hostDir) shared(p string) (bool, error) {
	fi, err := h.root.Lstat(p)
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode().IsRegular() && st.Nlink > 1, nil
}

// breakLink replaces p, when it is still shared, by a copy of its own
// (same mode and times), renamed over it. Call with cowMu held for
// writing.
func (h *hostDir) breakLink(p string) error {
	if shared, err := h.shared(p); err != nil || !shared {
		return err
	}
	in, err := h.root.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := filepath.Join(filepath.Dir(p), ".agentbox-cow-"+hex.EncodeToString(suffix[:]))
	out, err := h.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, cerr := io.Copy(out, in)
	err = errors.Join(cerr, out.Chmod(fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)), out.Close())
	if err == nil {
		err = h.root.Chtimes(tmp, fi.ModTime(), fi.ModTime())
	}
	if err == nil {
		err = h.root.Rename(tmp, p)
	}
	if err != nil {
		_ = h.root.Remove(tmp)
		return fmt.Errorf("mounts: unshare %s: %w", p, err)
	}
	return nil
}
