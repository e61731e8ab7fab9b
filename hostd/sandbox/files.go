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

// withAgent runs fn with the agent of running sandbox id, for path p.
func (m *Manager) withAgent(ctx context.Context, id string, paths []string, fn func(*agentclient.Client) error) error {
	for _, p := range paths {
		if err := CheckPath(p); err != nil {
			return err
		}
	}
	b, err := m.running(ctx, id)
	if err != nil {
		return err
	}
	c, err := m.agent(ctx, b)
	if err != nil {
		return m.streamErr(b, err)
	}
	if err := fn(c); err != nil {
		return m.fileErr(b, err)
	}
	return nil
}

// fileErr keeps guest file errors (they wrap errnos) and maps the rest.
func (m *Manager) fileErr(b *box, err error) error {
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return err
	case errors.Is(err, agentclient.ErrInvalid):
		return fmt.Errorf("%w: %v", ErrBadPath, err)
	}
	return m.streamErr(b, err)
}

// ReadFile opens a guest file; the error reflects the open.
func (m *Manager) ReadFile(ctx context.Context, id, p string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := m.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		r, _, err := c.Open(ctx, p)
		rc = r
		return err
	})
	return rc, err
}

// WriteFile replaces a guest file atomically with r's bytes, creating
// missing parent directories (0755, root).
func (m *Manager) WriteFile(ctx context.Context, id, p string, mode fs.FileMode, r io.Reader) error {
	if mode == 0 {
		mode = 0o644
	}
	h := newHashCounter(r)
	err := m.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		return writeMkParents(ctx, c, p, mode, h)
	})
	if err == nil {
		m.recordFile(ctx, id, recorder.FileData{Op: "written", Path: p, Size: h.n, SHA256: h.sum()})
	}
	return err
}

// ListDir describes a guest directory.
func (m *Manager) ListDir(ctx context.Context, id, p string) ([]FileInfo, error) {
	var out []FileInfo
	err := m.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		ents, err := c.List(ctx, p)
		for _, e := range ents {
			out = append(out, fileInfo(e))
		}
		return err
	})
	return out, err
}

// Stat describes a guest path.
func (m *Manager) Stat(ctx context.Context, id, p string) (FileInfo, error) {
	var out FileInfo
	err := m.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		fi, err := c.Stat(ctx, p)
		out = fileInfo(fi)
		return err
	})
	return out, err
}

// Mkdir creates a guest directory and its parents.
func (m *Manager) Mkdir(ctx context.Context, id, p string) error {
	err := m.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error { return c.Mkdir(ctx, p) })
	if err == nil {
		m.recordFile(ctx, id, recorder.FileData{Op: "created", Path: p, Dir: true})
	}
	return err
}

// Remove removes a guest path.
func (m *Manager) Remove(ctx context.Context, id, p string, recursive bool) error {
	err := m.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error { return c.Remove(ctx, p, recursive) })
	if err == nil {
		m.recordFile(ctx, id, recorder.FileData{Op: "deleted", Path: p})
	}
	return err
}

// Rename moves a guest path.
func (m *Manager) Rename(ctx context.Context, id, from, to string) error {
	err := m.withAgent(ctx, id, []string{from, to}, func(c *agentclient.Client) error { return c.Rename(ctx, from, to) })
	if err == nil {
		m.recordFile(ctx, id, recorder.FileData{Op: "renamed", Path: to, OldPath: from})
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
