package sandbox

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"math"
	"path"
	"strings"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/internal/archive"
)

// Archives and watches of guest directories, built on the guest's streamed
// Files RPCs: tar is parsed and written on the host (internal/archive), so
// the guest only ever sees single-path operations at checked paths (the
// guest checks them again). Hard links in an archive become copies.

// ErrBadArchive wraps the errors about an archive entry that is malformed
// or would land outside its directory.
var ErrBadArchive = archive.ErrInvalid

// ArchiveResult counts what PutArchive unpacked.
type ArchiveResult = archive.Result

// writeMkParents writes p like c.WriteFile, first creating p's missing
// parents (mode 0755, owned by the agent's user, root) when the guest says
// the directory is not there. It retries only when no byte of r was read,
// so the retry sends the whole content.
func writeMkParents(ctx context.Context, c *agentclient.Client, p string, mode fs.FileMode, r io.Reader, opts ...agentclient.WriteOption) error {
	cr := &readCount{r: r}
	_, err := c.WriteFile(ctx, p, mode, cr, opts...)
	if err == nil || cr.n > 0 || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := c.Mkdir(ctx, path.Dir(p)); err != nil {
		return err
	}
	_, err = c.WriteFile(ctx, p, mode, cr, opts...)
	return err
}

type readCount struct {
	r io.Reader
	n int64
}

func (c *readCount) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// guestTree is a guest directory as an archive.Sink and archive.Source.
type guestTree struct {
	rec *recorderFeed
	id  string
	c   *agentclient.Client
	dir string
}

func (g guestTree) path(name string) string { return path.Join(g.dir, name) }

func (g guestTree) Mkdir(ctx context.Context, name string) error {
	p := g.path(name)
	if err := g.c.Mkdir(ctx, p); err != nil {
		return err
	}
	g.rec.file(ctx, g.id, recorder.FileData{Op: "created", Path: p, Dir: true})
	return nil
}

func (g guestTree) WriteFile(ctx context.Context, name string, mode fs.FileMode, r io.Reader) error {
	p := g.path(name)
	h := newHashCounter(r)
	// The archive's files are synced once, at its end (PutArchive).
	if err := writeMkParents(ctx, g.c, p, mode, h, agentclient.DeferSync()); err != nil {
		return err
	}
	g.rec.file(ctx, g.id, recorder.FileData{Op: "written", Path: p, Size: h.n, SHA256: h.sum()})
	return nil
}

func (g guestTree) Symlink(ctx context.Context, name, target string) error {
	p := g.path(name)
	err := g.c.Symlink(ctx, target, p)
	if errors.Is(err, fs.ErrNotExist) {
		if err = g.c.Mkdir(ctx, path.Dir(p)); err == nil {
			err = g.c.Symlink(ctx, target, p)
		}
	}
	if err == nil {
		g.rec.file(ctx, g.id, recorder.FileData{Op: "created", Path: p})
	}
	return err
}

// Link copies the file target (a hard link in the archive) to name: the
// Files protocol has no hard links, and a copy is what a reader sees.
func (g guestTree) Link(ctx context.Context, name, target string) error {
	rc, _, err := g.c.Open(ctx, g.path(target))
	if err != nil {
		return err
	}
	defer rc.Close()
	fi, err := g.c.Stat(ctx, g.path(target))
	if err != nil {
		return err
	}
	return g.WriteFile(ctx, name, fi.Mode.Perm(), rc)
}

func (g guestTree) Readlink(ctx context.Context, name string) (string, error) {
	return g.c.Readlink(ctx, g.path(name))
}

func (g guestTree) List(ctx context.Context, name string) ([]archive.Entry, error) {
	infos, err := g.c.List(ctx, g.path(name))
	if err != nil {
		return nil, err
	}
	out := make([]archive.Entry, 0, len(infos))
	for _, fi := range infos {
		out = append(out, archive.Entry{Name: fi.Name, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime})
	}
	return out, nil
}

func (g guestTree) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, _, err := g.c.Open(ctx, g.path(name))
	return rc, err
}

// PutArchive unpacks a tar (or gzip-compressed tar) stream under guest
// directory dir, creating dir first. An entry that is absolute, has a ".."
// element, or is a link or special file stops it with an ErrBadArchive
// error naming the entry; entries before it stay written. The files are
// synced to the guest's disk once, when it ends, not one by one.
func (f *Files) PutArchive(ctx context.Context, id, dir string, r io.Reader) (ArchiveResult, error) {
	var res ArchiveResult
	err := f.withAgent(ctx, id, []string{dir}, func(c *agentclient.Client) error {
		if err := c.Mkdir(ctx, dir); err != nil {
			return err
		}
		var err error
		res, err = archive.Extract(ctx, r, guestTree{rec: f.rec, id: id, c: c, dir: dir})
		// One sync for all the files written, those before a bad entry too.
		return errors.Join(err, c.SyncFS(context.WithoutCancel(ctx), dir))
	})
	return res, err
}

// GetArchive streams guest directory dir to w as tar, names relative to
// dir. Check dir first (Stat): once bytes are written, an error can only
// abort the stream.
func (f *Files) GetArchive(ctx context.Context, id, dir string, w io.Writer) error {
	return f.withAgent(ctx, id, []string{dir}, func(c *agentclient.Client) error {
		return archive.Write(ctx, w, guestTree{rec: f.rec, id: id, c: c, dir: dir})
	})
}

// WatchEvent is a change under a watched guest directory. Type is create,
// modify, delete or rename (then OldPath is set).
type WatchEvent struct {
	Type, Path, OldPath string
	IsDir               bool
	Size                int64
	Time                time.Time
}

// watchOps maps the guest's file event ops to WatchEvent types.
var watchOps = map[string]string{"created": "create", "modified": "modify", "deleted": "delete", "renamed": "rename"}

// Watch reports the changes that guest processes make under dir (its
// direct children, or the whole tree if recursive) from now on, until ctx
// ends or the sandbox goes (then it returns nil). It reads the guest's event
// ring with its own cursor, beside the recorder's.
func (f *Files) Watch(ctx context.Context, id, dir string, recursive bool, emit func(WatchEvent) error) error {
	if err := CheckPath(dir); err != nil {
		return err
	}
	b, err := f.boxes.running(ctx, id)
	if err != nil {
		return err
	}
	c, err := b.client(ctx)
	if err != nil {
		return b.streamErr(err)
	}
	// The first read places the cursor at the newest event.
	evs, err := c.NextEvents(ctx, math.MaxUint64, 0, 1)
	if err != nil {
		return b.streamErr(err)
	}
	after := evs.Head
	bctx, cancel := b.bind(ctx)
	defer cancel()
	dir = path.Clean(dir)
	for bctx.Err() == nil {
		evs, err := c.NextEvents(bctx, after, guestPollWait, guestBatch)
		if err != nil {
			if bctx.Err() != nil {
				break
			}
			return b.streamErr(err)
		}
		if len(evs.Events) == 0 && evs.Head < after {
			after = evs.Head // the guest restarted its ring
		}
		for _, e := range evs.Events {
			after = max(after, e.Seq)
			if we, ok := watchEvent(e, dir, recursive); ok {
				if err := emit(we); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// watchEvent converts a guest event, if it is a file event under dir.
func watchEvent(e agentclient.GuestEvent, dir string, recursive bool) (WatchEvent, bool) {
	f := e.File
	if f == nil {
		return WatchEvent{}, false
	}
	typ, ok := watchOps[f.Op]
	if !ok || !(under(f.Path, dir, recursive) || (f.OldPath != "" && under(f.OldPath, dir, recursive))) {
		return WatchEvent{}, false
	}
	return WatchEvent{Type: typ, Path: f.Path, OldPath: f.OldPath, IsDir: f.Dir, Size: f.Size, Time: e.Time}, true
}

// under reports whether p is in dir (a direct child unless recursive).
func under(p, dir string, recursive bool) bool {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	if !strings.HasPrefix(p, prefix) || len(p) == len(prefix) {
		return false
	}
	return recursive || !strings.Contains(p[len(prefix):], "/")
}
