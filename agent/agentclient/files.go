package agentclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// chunkSize is the size of one file transfer call.
const chunkSize = 1 << 20

// FileInfo describes a guest file. Name and Path hold the guest's bytes,
// which need not be UTF-8.
type FileInfo struct {
	Name    string
	Path    string
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
	IsDir   bool
}

func infoFrom(i *agentv1.FileInfo) FileInfo {
	if i == nil {
		return FileInfo{}
	}
	return FileInfo{Name: string(i.Name), Path: string(i.Path), Size: i.Size, Mode: fs.FileMode(i.Mode),
		ModTime: time.Unix(0, i.ModTimeUnixNano), IsDir: i.IsDir}
}

// Open opens a guest file for reading. The returned reader pulls chunks on
// demand; closing it releases the guest's handle.
func (c *Client) Open(ctx context.Context, path string) (io.ReadCloser, FileInfo, error) {
	if s, err := c.fileStream(ctx); err != nil || s != nil {
		if err != nil {
			return nil, FileInfo{}, err
		}
		return c.openStream(s, path)
	}
	r, err := c.files.Open(ctx, &agentv1.PathRequest{Path: []byte(path)})
	if err != nil {
		return nil, FileInfo{}, fromStatus(err)
	}
	if err := checkID(r.Handle); err != nil {
		return nil, FileInfo{}, err
	}
	return &reader{c: c, ctx: ctx, handle: r.Handle}, infoFrom(r.Info), nil
}

type reader struct {
	c      *Client
	ctx    context.Context
	handle string
	buf    []byte
	eof    bool
	closed bool
	empty  int // empty non-final chunks in a row
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		resp, err := r.c.files.ReadChunk(r.ctx, &agentv1.ReadChunkRequest{Handle: r.handle, MaxBytes: chunkSize})
		if err != nil {
			return 0, fromStatus(err)
		}
		if len(resp.Data) > chunkSize {
			return 0, badReply("a chunk of %d bytes, asked for %d", len(resp.Data), chunkSize)
		}
		r.buf, r.eof = resp.Data, resp.Eof
		if len(r.buf) > 0 || r.eof {
			r.empty = 0
			continue
		}
		if r.empty++; r.empty > maxEmptyChunks {
			return 0, badReply("%d empty chunks in a row", r.empty)
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	ctx := context.WithoutCancel(r.ctx)
	_, err := r.c.files.Close(ctx, &agentv1.HandleRequest{Handle: r.handle})
	return fromStatus(err)
}

// WriteFile replaces path atomically with everything read from src and sets
// its mode. On any error the old file is left as it was. With file streams
// (WithFileStreams) the whole file goes on one stream; else in chunk calls.
func (c *Client) WriteFile(ctx context.Context, path string, mode fs.FileMode, src io.Reader, opts ...WriteOption) (int64, error) {
	req := &agentv1.CreateRequest{Path: []byte(path), Mode: wireMode(mode)}
	for _, o := range opts {
		o(req)
	}
	if s, err := c.fileStream(ctx); err != nil || s != nil {
		if err != nil {
			return 0, err
		}
		return c.writeStream(s, req, src)
	}
	h, err := c.files.Create(ctx, req)
	if err != nil {
		return 0, fromStatus(err)
	}
	if err := checkID(h.Handle); err != nil {
		return 0, err
	}
	abort := func(cause error) (int64, error) {
		_, cerr := c.files.Close(context.WithoutCancel(ctx), &agentv1.HandleRequest{Handle: h.Handle})
		return 0, errors.Join(cause, fromStatus(cerr))
	}
	buf := make([]byte, chunkSize)
	for {
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			if _, err := c.files.WriteChunk(ctx, &agentv1.WriteChunkRequest{Handle: h.Handle, Data: buf[:n]}); err != nil {
				return abort(fromStatus(err))
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return abort(rerr)
		}
	}
	r, err := c.files.Commit(ctx, &agentv1.HandleRequest{Handle: h.Handle})
	if err != nil {
		return 0, fromStatus(err)
	}
	return int64(r.Size), nil
}

// WriteOption changes how WriteFile writes.
type WriteOption func(*agentv1.CreateRequest)

// DeferSync leaves the file's fsync to a later SyncFS: a caller writing
// many files syncs once. Until then the file is visible in the guest but
// may not be on its disk.
func DeferSync() WriteOption { return func(r *agentv1.CreateRequest) { r.DeferSync = true } }

// SyncFS writes the guest filesystem that holds path to its disk. An agent
// that predates it answers Unimplemented; it also ignored DeferSync and
// synced each file, so that is no error.
func (c *Client) SyncFS(ctx context.Context, path string) error {
	_, err := c.files.SyncFS(ctx, &agentv1.PathRequest{Path: []byte(path)})
	if status.Code(err) == codes.Unimplemented {
		return nil
	}
	return fromStatus(err)
}

// Stat describes a guest path.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	r, err := c.files.Stat(ctx, &agentv1.PathRequest{Path: []byte(path)})
	if err != nil {
		return FileInfo{}, fromStatus(err)
	}
	fi := infoFrom(r)
	if err := checkInfo(fi); err != nil {
		return FileInfo{}, err
	}
	return fi, nil
}

// MaxListEntries bounds the entries List gathers from one directory.
const MaxListEntries = 1 << 20

// ErrTooMany is returned by List for a directory of more than
// MaxListEntries entries.
var ErrTooMany = errors.New("agentclient: too many directory entries")

// List describes a guest directory's entries, sorted by name, a page of
// them per call (each reply of the agent stays small).
func (c *Client) List(ctx context.Context, path string) ([]FileInfo, error) {
	var out []FileInfo
	var after []byte
	size := 0
	for {
		r, err := c.files.List(ctx, &agentv1.ListRequest{Path: []byte(path), After: after})
		if err != nil {
			return nil, fromStatus(err)
		}
		for _, e := range r.Entries {
			fi := infoFrom(e)
			if err := checkInfo(fi); err != nil {
				return nil, err
			}
			if size += len(fi.Name) + len(fi.Path); size > MaxListBytes {
				return nil, fmt.Errorf("%w: %s has more than %d bytes of names", ErrTooMany, path, MaxListBytes)
			}
			out = append(out, fi)
		}
		switch {
		case len(out) > MaxListEntries:
			return nil, fmt.Errorf("%w: %s has more than %d", ErrTooMany, path, MaxListEntries)
		case !r.More:
			return out, nil
		case len(r.Entries) == 0 || bytes.Compare(r.Entries[len(r.Entries)-1].Name, after) <= 0:
			return nil, fmt.Errorf("agentclient: list %s: the agent's page does not move on", path)
		}
		after = r.Entries[len(r.Entries)-1].Name
	}
}

// Mkdir creates a guest directory and its parents.
func (c *Client) Mkdir(ctx context.Context, path string) error {
	_, err := c.files.Mkdir(ctx, &agentv1.MkdirRequest{Path: []byte(path)})
	return fromStatus(err)
}

// Remove removes a guest path.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	_, err := c.files.Remove(ctx, &agentv1.RemoveRequest{Path: []byte(path), Recursive: recursive})
	return fromStatus(err)
}

// Rename moves a guest path.
func (c *Client) Rename(ctx context.Context, from, to string) error {
	_, err := c.files.Rename(ctx, &agentv1.RenameRequest{From: []byte(from), To: []byte(to)})
	return fromStatus(err)
}

// Symlink creates guest path as a symbolic link to target, replacing a
// file or link there.
func (c *Client) Symlink(ctx context.Context, target, path string) error {
	_, err := c.files.Symlink(ctx, &agentv1.SymlinkRequest{Target: []byte(target), Path: []byte(path)})
	return fromStatus(err)
}

// Readlink returns a guest symbolic link's target (untrusted: the caller
// bounds what it does with it).
func (c *Client) Readlink(ctx context.Context, path string) (string, error) {
	r, err := c.files.Readlink(ctx, &agentv1.PathRequest{Path: []byte(path)})
	if err != nil {
		return "", fromStatus(err)
	}
	if len(r.Target) > MaxPath {
		return "", badReply("a link target of %d bytes", len(r.Target))
	}
	return string(r.Target), nil
}
