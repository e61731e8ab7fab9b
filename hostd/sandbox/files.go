package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/hostd/recorder"
)

// CheckPath accepts only absolute guest paths without ".." elements.
func CheckPath(p string) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("%w: %q is not absolute", ErrBadPath, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("%w: %q contains '..'", ErrBadPath, p)
		}
	}
	return nil
}

// Files reads and writes the files of the manager's sandboxes through their
// agents, recording each change made through it.
type Files struct {
	boxes boxFinder
	rec   *recorderFeed
}

// boxFinder finds the running VM of a sandbox for the services (the
// Manager).
type boxFinder interface {
	// running returns sandbox id's running box, resuming it if it is
	// paused; live returns it only if it runs.
	running(ctx context.Context, id string) (*runningVM, error)
	live(ctx context.Context, id string) (*runningVM, error)
}

// withAgent runs fn with the agent of running sandbox id, for path p.
func (f *Files) withAgent(ctx context.Context, id string, paths []string, fn func(*agentclient.Client) error) error {
	for _, p := range paths {
		if err := CheckPath(p); err != nil {
			return err
		}
	}
	b, err := f.boxes.running(ctx, id)
	if err != nil {
		return err
	}
	c, err := b.client(ctx)
	if err != nil {
		return b.streamErr(err)
	}
	if err := fn(c); err != nil {
		return b.fileErr(err)
	}
	return nil
}

// fileErr keeps guest file errors (they wrap errnos) and maps the rest.
func (b *runningVM) fileErr(err error) error {
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return err
	case errors.Is(err, agentclient.ErrInvalid):
		return fmt.Errorf("%w: %v", ErrBadPath, err)
	}
	return b.streamErr(err)
}

// ReadFile opens a guest file; the error reflects the open.
func (f *Files) ReadFile(ctx context.Context, id, p string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := f.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		r, _, err := c.Open(ctx, p)
		rc = r
		return err
	})
	return rc, err
}

// WriteFile replaces a guest file atomically with r's bytes, creating
// missing parent directories (0755, root).
func (f *Files) WriteFile(ctx context.Context, id, p string, mode fs.FileMode, r io.Reader) error {
	if mode == 0 {
		mode = 0o644
	}
	h := newHashCounter(r)
	err := f.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		return writeMkParents(ctx, c, p, mode, h)
	})
	if err == nil {
		f.rec.file(ctx, id, recorder.FileData{Op: "written", Path: p, Size: h.n, SHA256: h.sum()})
	}
	return err
}

// ListDir describes a guest directory.
func (f *Files) ListDir(ctx context.Context, id, p string) ([]FileInfo, error) {
	var out []FileInfo
	err := f.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		ents, err := c.List(ctx, p)
		for _, e := range ents {
			out = append(out, fileInfo(e))
		}
		return err
	})
	return out, err
}

// Stat describes a guest path.
func (f *Files) Stat(ctx context.Context, id, p string) (FileInfo, error) {
	var out FileInfo
	err := f.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		fi, err := c.Stat(ctx, p)
		out = fileInfo(fi)
		return err
	})
	return out, err
}

// Mkdir creates a guest directory and its parents.
func (f *Files) Mkdir(ctx context.Context, id, p string) error {
	err := f.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error { return c.Mkdir(ctx, p) })
	if err == nil {
		f.rec.file(ctx, id, recorder.FileData{Op: "created", Path: p, Dir: true})
	}
	return err
}

// Remove removes a guest path.
func (f *Files) Remove(ctx context.Context, id, p string, recursive bool) error {
	err := f.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error { return c.Remove(ctx, p, recursive) })
	if err == nil {
		f.rec.file(ctx, id, recorder.FileData{Op: "deleted", Path: p})
	}
	return err
}

// Rename moves a guest path.
func (f *Files) Rename(ctx context.Context, id, from, to string) error {
	err := f.withAgent(ctx, id, []string{from, to}, func(c *agentclient.Client) error { return c.Rename(ctx, from, to) })
	if err == nil {
		f.rec.file(ctx, id, recorder.FileData{Op: "renamed", Path: to, OldPath: from})
	}
	return err
}

func fileInfo(e agentclient.FileInfo) FileInfo {
	return FileInfo{Name: e.Name, Path: e.Path, Size: e.Size, Mode: e.Mode, ModTime: e.ModTime, IsDir: e.IsDir}
}

// hashCounter counts and hashes the bytes read through it.
type hashCounter struct {
	r io.Reader
	h hash.Hash
	n int64
}

func newHashCounter(r io.Reader) *hashCounter { return &hashCounter{r: r, h: sha256.New()} }

func (c *hashCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

func (c *hashCounter) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }
