package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Limits of the Files service.
const (
	maxChunk    = 1 << 20
	handleIdle  = 2 * time.Minute // an unused handle is closed after this
	maxHandles  = 64
	defaultMode = 0o644
	// modeBits are the mode bits a written file keeps: permissions, setuid,
	// setgid and sticky (as Go's fs.FileMode spells them).
	modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	// listReplyMax bounds the encoded entries of one List page, and
	// listPageMax their number: far under ttrpc's 4 MiB message.
	listReplyMax = 1 << 20
	listPageMax  = 8192
)

// Files is the Files service.
type Files struct {
	mu      sync.Mutex
	handles map[string]*handle
	now     func() time.Time
}

var _ agentv1.FilesService = (*Files)(nil)

// handle is an open file: a reader, or a pending atomic write.
type handle struct {
	mu      sync.Mutex
	f       *os.File
	path    string // the target of a write
	mode    fs.FileMode
	write   bool
	noSync  bool // commit leaves the fsync to a later SyncFS
	size    uint64
	lastUse time.Time
}

// NewFiles returns a Files service.
func NewFiles() *Files {
	return &Files{handles: map[string]*handle{}, now: time.Now}
}

// cleanPath checks a path from the host: its bytes, which need not be
// UTF-8, as a Go string.
func cleanPath(b []byte) (string, error) {
	p := string(b)
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %q", errBadPath, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: %q has '..'", errBadPath, p)
		}
	}
	return filepath.Clean(p), nil
}

// Open opens a regular file for reading.
func (f *Files) Open(ctx context.Context, req *agentv1.PathRequest) (*agentv1.OpenResponse, error) {
	file, fi, err := openRead(req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	id, err := f.put(&handle{f: file})
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.OpenResponse{Handle: id, Info: infoOf(file.Name(), fi)}, nil
}

// openRead opens the regular file at path from the host for reading.
func openRead(path []byte) (*os.File, fs.FileInfo, error) {
	p, err := cleanPath(path)
	if err != nil {
		return nil, nil, err
	}
	file, err := os.Open(p)
	if err != nil {
		return nil, nil, err
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, nil, err
	}
	if fi.IsDir() {
		file.Close()
		return nil, nil, &fs.PathError{Op: "read", Path: p, Err: errIsDir}
	}
	return file, fi, nil
}

// ReadChunk reads the next bytes of a handle.
func (f *Files) ReadChunk(ctx context.Context, req *agentv1.ReadChunkRequest) (*agentv1.ReadChunkResponse, error) {
	h, err := f.take(req.Handle)
	if err != nil {
		return nil, toStatus(err)
	}
	defer h.mu.Unlock()
	if h.write {
		return nil, toStatus(fmt.Errorf("%w: handle is for writing", errBadArgs))
	}
	n := int(req.MaxBytes)
	if n <= 0 || n > maxChunk {
		n = maxChunk
	}
	buf := make([]byte, n)
	got, err := io.ReadFull(h.f, buf)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &agentv1.ReadChunkResponse{Data: buf[:got], Eof: true}, nil
	case err != nil:
		return nil, toStatus(err)
	}
	return &agentv1.ReadChunkResponse{Data: buf[:got]}, nil
}

// Create starts an atomic replacement of a file.
func (f *Files) Create(ctx context.Context, req *agentv1.CreateRequest) (*agentv1.OpenResponse, error) {
	h, err := createTemp(req)
	if err != nil {
		return nil, toStatus(err)
	}
	id, err := f.put(h)
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.OpenResponse{Handle: id}, nil
}

// createTemp starts the atomic replacement of req's file: a write handle
// on a temporary file beside it.
func createTemp(req *agentv1.CreateRequest) (*handle, error) {
	p, err := cleanPath(req.Path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "write", Path: p, Err: errIsDir}
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".agentbox-*")
	if err != nil {
		return nil, err
	}
	mode := fs.FileMode(req.Mode) & modeBits
	if req.Mode == 0 {
		mode = defaultMode
	}
	return &handle{f: tmp, path: p, mode: mode, write: true, noSync: req.DeferSync}, nil
}

// WriteChunk appends data to a pending write.
func (f *Files) WriteChunk(ctx context.Context, req *agentv1.WriteChunkRequest) (*agentv1.Empty, error) {
	h, err := f.take(req.Handle)
	if err != nil {
		return nil, toStatus(err)
	}
	defer h.mu.Unlock()
	if !h.write {
		return nil, toStatus(fmt.Errorf("%w: handle is for reading", errBadArgs))
	}
	n, err := h.f.Write(req.Data)
	h.size += uint64(n)
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.Empty{}, nil
}

// Commit makes a pending write visible at its path.
func (f *Files) Commit(ctx context.Context, req *agentv1.HandleRequest) (*agentv1.CommitResponse, error) {
	h, err := f.take(req.Handle)
	if err != nil {
		return nil, toStatus(err)
	}
	defer h.mu.Unlock()
	f.drop(req.Handle)
	if !h.write {
		h.f.Close()
		return nil, toStatus(fmt.Errorf("%w: handle is for reading", errBadArgs))
	}
	if err := h.commit(); err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.CommitResponse{Size: h.size}, nil
}

// commit makes write handle h's file visible at its path, fsynced (unless
// the host defers that to SyncFS) and with its mode, and closes it; on failure it removes the temporary file.
func (h *handle) commit() error {
	tmp := h.f.Name()
	err := h.f.Chmod(h.mode)
	if !h.noSync {
		err = errors.Join(err, h.f.Sync())
	}
	err = errors.Join(err, h.f.Close())
	if err == nil {
		err = os.Rename(tmp, h.path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Close releases a handle, discarding an uncommitted write.
func (f *Files) Close(ctx context.Context, req *agentv1.HandleRequest) (*agentv1.Empty, error) {
	h, err := f.take(req.Handle)
	if err != nil {
		return nil, toStatus(err)
	}
	defer h.mu.Unlock()
	f.drop(req.Handle)
	h.release()
	return &agentv1.Empty{}, nil
}

// release closes the file and removes an uncommitted temporary file. Call
// with h.mu held.
func (h *handle) release() {
	h.f.Close()
	if h.write {
		os.Remove(h.f.Name())
	}
}

// put stores h under a new id, first closing handles idle too long. It
// releases h and fails when too many handles are open.
func (f *Files) put(h *handle) (string, error) {
	h.lastUse = f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, o := range f.handles {
		if o.mu.TryLock() {
			if f.now().Sub(o.lastUse) > handleIdle {
				o.release()
				delete(f.handles, id)
			}
			o.mu.Unlock()
		}
	}
	if len(f.handles) >= maxHandles {
		h.release()
		return "", fmt.Errorf("%w: %d files open", errTooMany, maxHandles)
	}
	id := newID()
	f.handles[id] = h
	return id, nil
}

// take finds a handle and returns it locked.
func (f *Files) take(id string) (*handle, error) {
	f.mu.Lock()
	h, ok := f.handles[id]
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", errNoHandle, id)
	}
	h.mu.Lock()
	h.lastUse = f.now()
	return h, nil
}

func (f *Files) drop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.handles, id)
}

// Stat describes a path.
func (f *Files) Stat(ctx context.Context, req *agentv1.PathRequest) (*agentv1.FileInfo, error) {
	p, err := cleanPath(req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, toStatus(err)
	}
	return infoOf(p, fi), nil
}

// List answers one page of a directory's entries, sorted by name bytes:
// the entries after req.After, as many as fit in listReplyMax bytes and
// listPageMax entries (or req.MaxEntries). Each page reads the directory's
// names again (cheap; no stat) and stats only its own entries.
func (f *Files) List(ctx context.Context, req *agentv1.ListRequest) (*agentv1.ListResponse, error) {
	p, err := cleanPath(req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	d, err := os.Open(p)
	if err != nil {
		return nil, toStatus(err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, toStatus(err)
	}
	sort.Strings(names) // Go compares strings bytewise
	after := string(req.After)
	i := sort.SearchStrings(names, after)
	if i < len(names) && names[i] == after && after != "" {
		i++
	}
	max := int(req.MaxEntries)
	if max <= 0 || max > listPageMax {
		max = listPageMax
	}
	resp := &agentv1.ListResponse{}
	size := 0
	for ; i < len(names); i++ {
		if len(resp.Entries) >= max || size >= listReplyMax {
			resp.More = true
			break
		}
		full := filepath.Join(p, names[i])
		fi, err := os.Lstat(full)
		if err != nil {
			continue // removed while listing
		}
		e := infoOf(full, fi)
		size += proto.Size(e) + 8
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

// Mkdir creates a directory and its parents.
func (f *Files) Mkdir(ctx context.Context, req *agentv1.MkdirRequest) (*agentv1.Empty, error) {
	p, err := cleanPath(req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	mode := fs.FileMode(req.Mode) & fs.ModePerm
	if mode == 0 {
		mode = 0o755
	}
	if err := os.MkdirAll(p, mode); err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.Empty{}, nil
}

// Remove removes a file, or a directory (recursively if asked).
func (f *Files) Remove(ctx context.Context, req *agentv1.RemoveRequest) (*agentv1.Empty, error) {
	p, err := cleanPath(req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	if p == "/" {
		return nil, toStatus(fmt.Errorf("%w: refusing to remove /", errBadPath))
	}
	if _, err := os.Lstat(p); err != nil {
		return nil, toStatus(err)
	}
	if req.Recursive {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.Empty{}, nil
}

// Rename moves a path.
func (f *Files) Rename(ctx context.Context, req *agentv1.RenameRequest) (*agentv1.Empty, error) {
	from, err := cleanPath(req.From)
	if err != nil {
		return nil, toStatus(err)
	}
	to, err := cleanPath(req.To)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := os.Rename(from, to); err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.Empty{}, nil
}

func infoOf(p string, fi fs.FileInfo) *agentv1.FileInfo {
	return &agentv1.FileInfo{
		Name:            []byte(fi.Name()),
		Path:            []byte(p),
		Size:            fi.Size(),
		Mode:            uint32(fi.Mode()),
		ModTimeUnixNano: fi.ModTime().UnixNano(),
		IsDir:           fi.IsDir(),
	}
}

// maxLinkTarget bounds a symbolic link's target (Linux's PATH_MAX).
const maxLinkTarget = 4096

// Symlink creates a symbolic link, replacing a file or link at its path
// (never a directory).
func (f *Files) Symlink(ctx context.Context, req *agentv1.SymlinkRequest) (*agentv1.Empty, error) {
	p, err := cleanPath(req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	if len(req.Target) == 0 || len(req.Target) > maxLinkTarget || bytes.IndexByte(req.Target, 0) >= 0 {
		return nil, toStatus(fmt.Errorf("%w: bad link target", errBadArgs))
	}
	if fi, err := os.Lstat(p); err == nil {
		if fi.IsDir() {
			return nil, toStatus(&fs.PathError{Op: "symlink", Path: p, Err: errIsDir})
		}
		if err := os.Remove(p); err != nil {
			return nil, toStatus(err)
		}
	}
	if err := os.Symlink(string(req.Target), p); err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.Empty{}, nil
}

// Readlink returns a symbolic link's target.
func (f *Files) Readlink(ctx context.Context, req *agentv1.PathRequest) (*agentv1.ReadlinkResponse, error) {
	p, err := cleanPath(req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	t, err := os.Readlink(p)
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.ReadlinkResponse{Target: []byte(t)}, nil
}

// SyncFS writes the filesystem that holds a path to its disk.
func (f *Files) SyncFS(ctx context.Context, req *agentv1.PathRequest) (*agentv1.Empty, error) {
	p, err := cleanPath(req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	d, err := os.Open(p)
	if err != nil {
		return nil, toStatus(err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return nil, toStatus(&fs.PathError{Op: "syncfs", Path: p, Err: err})
	}
	return &agentv1.Empty{}, nil
}
