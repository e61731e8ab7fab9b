package mount

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// maxDirEntries bounds the listing of one directory that the guest holds.
const maxDirEntries = 1 << 20

// dirHandle is an open directory. Its first read fetches the whole listing
// (in pages, bounded by maxDirEntries) with each entry's attributes, and
// the kernel's READDIRPLUS takes them from it (Lookup): a listing of 10k
// entries is a few calls, not one per entry, and the stats that follow it
// (ls -l) are answered from the kernel's cache.
type dirHandle struct {
	n *node

	mu     sync.Mutex
	list   []dirEntry
	loaded bool
	pos    int // the next entry's index
}

// dirEntry is one listed entry, kept compact (a listing may hold
// maxDirEntries): attr is nil where the host sent no attributes.
type dirEntry struct {
	name string
	mode uint32 // type bits
	ino  uint64
	attr *agentv1.MountAttr
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
)

// OpendirHandle opens a directory; a read-only mount keeps its listing
// cached in the kernel across opens (FOPEN_CACHE_DIR).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	var fl uint32
	if n.m.readOnly {
		fl = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return &dirHandle{n: n}, fl, 0
}

// load fetches the listing (d.mu held).
func (d *dirHandle) load(ctx context.Context) syscall.Errno {
	if d.loaded {
		return 0
	}
	var list []dirEntry
	for eof := false; !eof; {
		errno := d.n.call(ctx, func(ctx context.Context, c agentv1.MountsService, id string) (int32, error) {
			r, err := c.ReadDir(ctx, &agentv1.MountReadDirRequest{Mount: id, Path: d.n.rel(), Offset: uint64(len(list)), Plus: true})
			for _, e := range r.GetEntries() {
				list = append(list, dirEntry{name: e.Name, mode: e.Mode, ino: e.Ino, attr: e.Attr})
			}
			eof = r.GetEof() || len(r.GetEntries()) == 0 || len(list) >= maxDirEntries
			return r.GetErrno(), err
		})
		if errno != 0 {
			return errno
		}
	}
	d.list, d.loaded = list[:min(len(list), maxDirEntries)], true
	return 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if errno := d.load(ctx); errno != 0 {
		return nil, errno
	}
	if d.pos >= len(d.list) {
		return nil, 0
	}
	e := d.list[d.pos]
	d.pos++
	return &fuse.DirEntry{Name: e.name, Mode: e.mode, Ino: e.ino, Off: uint64(d.pos)}, 0
}

// Seekdir goes back to an offset that Readdirent gave (the index after the
// entry).
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if errno := d.load(ctx); errno != 0 {
		return errno
	}
	d.pos = int(min(off, uint64(len(d.list))))
	return 0
}

// Lookup answers READDIRPLUS's lookup of the entry Readdirent gave last
// from the listing's attributes; an entry without them (the host could not
// read them) is looked up.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.mu.Lock()
	var a *agentv1.MountAttr
	if d.pos > 0 && d.pos <= len(d.list) && d.list[d.pos-1].name == name {
		e := d.list[d.pos-1]
		if e.attr != nil && e.attr.Mode&syscall.S_IFMT == e.mode&syscall.S_IFMT {
			a = e.attr
		}
	}
	d.mu.Unlock()
	if a == nil {
		return d.n.Lookup(ctx, name, out)
	}
	return d.n.newChild(ctx, a, out), 0
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {}
