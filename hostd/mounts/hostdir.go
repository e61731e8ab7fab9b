package mounts

import (
	"errors"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// backend is what a mount's operations are served from. Paths are already
// checked (clean, relative, "." for the root).
type backend interface {
	Lstat(p string) (*agentv1.MountAttr, error)
	// ReadDir returns up to max entries after the first offset, each with
	// its attributes when plus is set (nil where they could not be read).
	ReadDir(p string, offset, max int, plus bool) ([]*agentv1.MountDirEntry, bool, error)
	ReadAt(p string, buf []byte, off int64) (int, error)
	WriteAt(p string, data []byte, off int64) (int, error)
	Create(p string, perm fs.FileMode, excl bool) error
	Mkdir(p string, perm fs.FileMode) error
	Symlink(target, p string) error
	Readlink(p string) (string, error)
	Remove(p string, dir bool) error
	Rename(from, to string) error
	SetAttr(p string, req *agentv1.MountSetAttrRequest) error
	// Flush makes the writes to p durable (the guest closed or synced it).
	Flush(p string) error
	Close() error
}

// hostDir serves a host directory through os.Root, which refuses any path
// (or symlink) that leads out of it. symlinks lets the guest make symlinks
// that stay inside (symlinks.go).
type hostDir struct {
	root     *os.Root
	symlinks bool
	// cow: dir is a git clone whose files a fork may share (gitfork.go),
	// so a write first gives a shared file a copy of its own.
	cow bool
}

func openHostDir(dir string, symlinks, cow bool) (*hostDir, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &hostDir{root: r, symlinks: symlinks, cow: cow}, nil
}

func (h *hostDir) Close() error { return h.root.Close() }

// Flush has nothing to do: every write went to the host file.
func (h *hostDir) Flush(string) error { return nil }

func (h *hostDir) Lstat(p string) (*agentv1.MountAttr, error) {
	fi, err := h.root.Lstat(p)
	if err != nil {
		return nil, err
	}
	return attrOf(fi), nil
}

// attrOf converts a host file's stat.
func attrOf(fi fs.FileInfo) *agentv1.MountAttr {
	a := &agentv1.MountAttr{Size: uint64(fi.Size()), MtimeNs: fi.ModTime().UnixNano(), Nlink: 1}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		a.Ino, a.Mode, a.Nlink = st.Ino, st.Mode, uint32(st.Nlink)
		if fi.Mode().IsRegular() {
			a.Nlink = 1 // the guest makes no hard links; a clone's are a fork's sharing
		}
	} else {
		a.Mode = uint32(fi.Mode().Perm()) | typeBits(fi.Mode())
	}
	return a
}

// typeBits are the stat(2) type bits of a Go file mode.
func typeBits(m fs.FileMode) uint32 {
	switch {
	case m.IsDir():
		return syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		return syscall.S_IFLNK
	case m&fs.ModeNamedPipe != 0:
		return syscall.S_IFIFO
	case m&fs.ModeSocket != 0:
		return syscall.S_IFSOCK
	case m&fs.ModeCharDevice != 0:
		return syscall.S_IFCHR
	case m&fs.ModeDevice != 0:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

// ReadDir returns up to max entries after the first offset, reading the
// directory in chunks so that memory stays bounded whatever its size.
func (h *hostDir) ReadDir(p string, offset, max int, plus bool) ([]*agentv1.MountDirEntry, bool, error) {
	f, err := h.root.Open(p)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	out, eof, err := readDir(f, offset, max)
	if err != nil || !plus {
		return out, eof, err
	}
	// Each entry's attributes relative to the open directory (one
	// fstatat, no path walked again): an entry gone since the listing has
	// none, and the guest looks it up.
	fd := int(f.Fd())
	for _, e := range out {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, e.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			e.Attr = statAttr(&st)
		}
	}
	return out, eof, nil
}

// statAttr converts an fstatat result as attrOf does a FileInfo.
func statAttr(st *unix.Stat_t) *agentv1.MountAttr {
	a := &agentv1.MountAttr{Ino: st.Ino, Mode: st.Mode, Size: uint64(st.Size), MtimeNs: st.Mtim.Nano(), Nlink: uint32(st.Nlink)}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		a.Nlink = 1 // as attrOf
	}
	return a
}

// readDir lists up to max entries of the open directory f after the first
// offset.
func readDir(f *os.File, offset, max int) ([]*agentv1.MountDirEntry, bool, error) {
	var out []*agentv1.MountDirEntry
	seen := 0
	for len(out) < max {
		des, err := f.ReadDir(256)
		for _, de := range des {
			if seen++; seen <= offset || len(out) >= max {
				continue
			}
			out = append(out, &agentv1.MountDirEntry{Name: de.Name(), Mode: typeBits(de.Type()), Ino: nameIno(de.Name())})
		}
		if errors.Is(err, io.EOF) || (err == nil && len(des) == 0) {
			return out, seen <= offset+len(out), nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	return out, false, nil
}

// nameIno is a nonzero directory-entry inode number; the kernel takes the
// real one from the lookup that follows.
func nameIno(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64() | 1
}

func (h *hostDir) ReadAt(p string, buf []byte, off int64) (int, error) {
	f, err := h.root.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.ReadAt(buf, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (h *hostDir) WriteAt(p string, data []byte, off int64) (int, error) {
	var n int
	err := h.forWrite(p, func() error {
		f, err := h.root.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		n, err = f.WriteAt(data, off)
		return errors.Join(err, f.Close())
	})
	return n, err
}

func (h *hostDir) Create(p string, perm fs.FileMode, excl bool) error {
	flags := os.O_WRONLY | os.O_CREATE
	if excl {
		flags |= os.O_EXCL
	}
	f, err := h.root.OpenFile(p, flags, perm)
	if err != nil {
		return err
	}
	return f.Close()
}

func (h *hostDir) Mkdir(p string, perm fs.FileMode) error { return h.root.Mkdir(p, perm) }
func (h *hostDir) Readlink(p string) (string, error)      { return h.root.Readlink(p) }

// Remove removes a file (dir false) or an empty directory (dir true), as
// unlink(2) and rmdir(2) do.
func (h *hostDir) Remove(p string, dir bool) error {
	fi, err := h.root.Lstat(p)
	if err != nil {
		return err
	}
	switch {
	case dir && !fi.IsDir():
		return &fs.PathError{Op: "rmdir", Path: p, Err: syscall.ENOTDIR}
	case !dir && fi.IsDir():
		return &fs.PathError{Op: "unlink", Path: p, Err: syscall.EISDIR}
	}
	return h.root.Remove(p)
}

func (h *hostDir) SetAttr(p string, req *agentv1.MountSetAttrRequest) error {
	return h.forWrite(p, func() error { return h.setAttr(p, req) })
}

func (h *hostDir) setAttr(p string, req *agentv1.MountSetAttrRequest) error {
	if req.Size != nil {
		f, err := h.root.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if err := errors.Join(f.Truncate(int64(*req.Size)), f.Close()); err != nil {
			return err
		}
	}
	if req.Mode != nil {
		if err := h.root.Chmod(p, fs.FileMode(*req.Mode&0o7777)); err != nil {
			return err
		}
	}
	if req.MtimeNs != nil || req.AtimeNs != nil {
		fi, err := h.root.Lstat(p)
		if err != nil {
			return err
		}
		mt, at := fi.ModTime(), fi.ModTime()
		if req.MtimeNs != nil {
			mt = time.Unix(0, *req.MtimeNs)
		}
		if req.AtimeNs != nil {
			at = time.Unix(0, *req.AtimeNs)
		}
		return h.root.Chtimes(p, at, mt)
	}
	return nil
}
