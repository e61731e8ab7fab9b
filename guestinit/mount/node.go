package mount

import (
	"context"
	"path"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// node is a file or directory of a mount, named by its path from the root.
// It keeps no host state: every operation names the path, so a new host
// connection serves it as well as the old one.
type node struct {
	fs.Inode
	m *mountFS
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeReader         = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeFlusher        = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
)

// rel is n's path relative to the mount's root ("" for the root).
func (n *node) rel() string { return n.Path(nil) }

func (n *node) child(name string) string { return path.Join(n.rel(), name) }

func (n *node) call(ctx context.Context, fn func(ctx context.Context, c agentv1.MountsService, id string) (int32, error)) syscall.Errno {
	id := n.m.mountID()
	if id == "" {
		return syscall.EIO
	}
	return n.m.svc.call(ctx, func(ctx context.Context, c agentv1.MountsService) (int32, error) {
		return fn(ctx, c, id)
	})
}

// fill copies a host attr into a FUSE attr; the guest's root owns every file.
func fill(a *agentv1.MountAttr, out *fuse.Attr) {
	if a == nil {
		return
	}
	out.Ino, out.Mode, out.Size, out.Nlink = a.Ino, a.Mode, a.Size, a.Nlink
	out.Blocks = (a.Size + 511) / 512
	out.Blksize = ioSize // programs size their buffers by it (cp, cat)
	sec, nsec := uint64(a.MtimeNs/1e9), uint32(a.MtimeNs%1e9)
	out.Mtime, out.Mtimensec = sec, nsec
	out.Ctime, out.Ctimensec = sec, nsec
	out.Atime, out.Atimensec = sec, nsec
}

// newChild makes the inode of a child that the host described.
func (n *node) newChild(ctx context.Context, a *agentv1.MountAttr, out *fuse.EntryOut) *fs.Inode {
	fill(a, &out.Attr)
	return n.NewInode(ctx, &node{m: n.m}, fs.StableAttr{Mode: a.GetMode() & syscall.S_IFMT, Ino: a.GetIno()})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var attr *agentv1.MountAttr
	errno := n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		r, err := c.Lstat(ctx, &agentv1.MountPathRequest{Mount: id, Path: n.child(name)})
		attr = r.GetAttr()
		return r.GetErrno(), err
	})
	if errno != 0 {
		return nil, errno
	}
	return n.newChild(ctx, attr, out), 0
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		r, err := c.Lstat(ctx, &agentv1.MountPathRequest{Mount: id, Path: n.rel()})
		fill(r.GetAttr(), &out.Attr)
		return r.GetErrno(), err
	})
}

func (n *node) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	req := &agentv1.MountSetAttrRequest{Path: n.rel()}
	if sz, ok := in.GetSize(); ok {
		req.Size = &sz
	}
	if mode, ok := in.GetMode(); ok {
		req.Mode = &mode
	}
	if mt, ok := in.GetMTime(); ok {
		ns := mt.UnixNano()
		req.MtimeNs = &ns
	}
	if at, ok := in.GetATime(); ok {
		ns := at.UnixNano()
		req.AtimeNs = &ns
	}
	return n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		req.Mount = id
		r, err := c.SetAttr(ctx, req)
		fill(r.GetAttr(), &out.Attr)
		return r.GetErrno(), err
	})
}

// Open keeps no handle: reads and writes name the path. On a read-write
// mount FOPEN_KEEP_CACHE is not set, so each open sees what the host has
// now; a read-only mount keeps the file's cached data (until its attributes,
// refreshed after roCacheTimeout, show another size or time).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.m.readOnly {
		return nil, fuse.FOPEN_KEEP_CACHE, 0
	}
	return nil, 0, 0
}

func (n *node) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if len(dest) > ioSize {
		dest = dest[:ioSize]
	}
	var data []byte
	errno := n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		r, err := c.Read(ctx, &agentv1.MountReadRequest{Mount: id, Path: n.rel(), Offset: off, Size: uint32(len(dest))})
		data = r.GetData()
		return r.GetErrno(), err
	})
	if errno != 0 {
		return nil, errno
	}
	if len(data) > len(dest) { // the host is not trusted to keep to the size
		data = data[:len(dest)]
	}
	return fuse.ReadResultData(data), 0
}

func (n *node) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	var written uint32
	for len(data) > 0 {
		chunk := data[:min(len(data), ioSize)]
		var w uint32
		errno := n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
			r, err := c.Write(ctx, &agentv1.MountWriteRequest{Mount: id, Path: n.rel(), Offset: off, Data: chunk})
			w = r.GetWritten()
			return r.GetErrno(), err
		})
		if errno != 0 {
			return written, errno
		}
		if w == 0 || int(w) > len(chunk) {
			return written, syscall.EIO
		}
		written += w
		off += int64(w)
		data = data[w:]
	}
	return written, 0
}

// Flush and Fsync tell the host, which uploads what a buffering backend
// (an S3 bucket) holds for the file; a host directory has nothing to do.
func (n *node) Flush(ctx context.Context, _ fs.FileHandle) syscall.Errno { return n.flush(ctx) }

func (n *node) Fsync(ctx context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	return n.flush(ctx)
}

func (n *node) flush(ctx context.Context) syscall.Errno {
	return n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		r, err := c.Flush(ctx, &agentv1.MountPathRequest{Mount: id, Path: n.rel()})
		return r.GetErrno(), err
	})
}

// made runs a call that creates name and returns its attributes.
func (n *node) made(ctx context.Context, out *fuse.EntryOut, fn func(ctx context.Context, c agentv1.MountsService, id string) (*agentv1.MountAttrResponse, error)) (*fs.Inode, syscall.Errno) {
	var attr *agentv1.MountAttr
	errno := n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		r, err := fn(ctx, c, id)
		attr = r.GetAttr()
		return r.GetErrno(), err
	})
	if errno != 0 {
		return nil, errno
	}
	return n.newChild(ctx, attr, out), 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ino, errno := n.made(ctx, out, func(ctx context.Context, c agentv1.MountsService, id string) (*agentv1.MountAttrResponse, error) {
		return c.Create(ctx, &agentv1.MountCreateRequest{Mount: id, Path: n.child(name), Mode: mode, Exclusive: flags&syscall.O_EXCL != 0})
	})
	return ino, nil, 0, errno
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.made(ctx, out, func(ctx context.Context, c agentv1.MountsService, id string) (*agentv1.MountAttrResponse, error) {
		return c.Mkdir(ctx, &agentv1.MountCreateRequest{Mount: id, Path: n.child(name), Mode: mode})
	})
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.made(ctx, out, func(ctx context.Context, c agentv1.MountsService, id string) (*agentv1.MountAttrResponse, error) {
		return c.Symlink(ctx, &agentv1.MountSymlinkRequest{Mount: id, Path: n.child(name), Target: target})
	})
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	var target string
	errno := n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		r, err := c.Readlink(ctx, &agentv1.MountPathRequest{Mount: id, Path: n.rel()})
		target = r.GetTarget()
		return r.GetErrno(), err
	})
	return []byte(target), errno
}

func (n *node) remove(ctx context.Context, name string, dir bool) syscall.Errno {
	return n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		r, err := c.Remove(ctx, &agentv1.MountRemoveRequest{Mount: id, Path: n.child(name), Dir: dir})
		return r.GetErrno(), err
	})
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(ctx, name, false)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(ctx, name, true)
}

// Rename supports plain renames; flags (RENAME_NOREPLACE, RENAME_EXCHANGE)
// answer EINVAL, on which tools fall back to a plain rename.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags != 0 {
		return syscall.EINVAL
	}
	to := path.Join(newParent.EmbeddedInode().Path(nil), newName)
	return n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
		r, err := c.Rename(ctx, &agentv1.MountRenameRequest{Mount: id, From: n.child(name), To: to})
		return r.GetErrno(), err
	})
}
