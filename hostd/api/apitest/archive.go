package apitest

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"path"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/internal/archive"
)

// SetWatch sets the events that Watch emits (then it waits for ctx).
func (f *Manager) SetWatch(evs ...sandbox.WatchEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watch = evs
}

// fakeTree is a directory of the fake's files as an archive.Sink/Source.
type fakeTree struct {
	f   *Manager
	id  string
	dir string
}

func (t fakeTree) Mkdir(ctx context.Context, name string) error {
	return t.f.Mkdir(ctx, t.id, path.Join(t.dir, name))
}

func (t fakeTree) WriteFile(ctx context.Context, name string, mode fs.FileMode, r io.Reader) error {
	return t.f.WriteFile(ctx, t.id, path.Join(t.dir, name), mode, r)
}

func (t fakeTree) List(ctx context.Context, name string) ([]archive.Entry, error) {
	infos, err := t.f.ListDir(ctx, t.id, path.Join(t.dir, name))
	out := make([]archive.Entry, 0, len(infos))
	for _, fi := range infos {
		mode := fi.Mode
		if fi.IsDir {
			mode |= fs.ModeDir
		}
		out = append(out, archive.Entry{Name: fi.Name, Size: fi.Size, Mode: mode, ModTime: fi.ModTime})
	}
	return out, err
}

func (t fakeTree) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	ff, err := t.f.file(t.id, path.Join(t.dir, name))
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(ff.Data)), nil
}

// PutArchive unpacks r into the fake's files with the real extractor.
func (f *Manager) PutArchive(ctx context.Context, id, dir string, r io.Reader) (sandbox.ArchiveResult, error) {
	if err := f.call("PutArchive"); err != nil {
		return sandbox.ArchiveResult{}, err
	}
	if err := f.Mkdir(ctx, id, dir); err != nil {
		return sandbox.ArchiveResult{}, err
	}
	return archive.Extract(ctx, r, fakeTree{f: f, id: id, dir: dir})
}

// GetArchive writes the fake's files under dir as tar.
func (f *Manager) GetArchive(ctx context.Context, id, dir string, w io.Writer) error {
	if err := f.call("GetArchive"); err != nil {
		return err
	}
	return archive.Write(ctx, w, fakeTree{f: f, id: id, dir: dir})
}

// Watch emits the events set with SetWatch that are under dir, then waits
// for ctx.
func (f *Manager) Watch(ctx context.Context, id, dir string, recursive bool, emit func(sandbox.WatchEvent) error) error {
	if err := f.call("Watch"); err != nil {
		return err
	}
	if _, err := f.lookup(id); err != nil {
		return err
	}
	f.mu.Lock()
	evs := f.watch
	f.mu.Unlock()
	for _, ev := range evs {
		if path.Dir(ev.Path) == dir || recursive {
			if err := emit(ev); err != nil {
				return err
			}
		}
	}
	<-ctx.Done()
	return nil
}
