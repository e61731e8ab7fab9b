package archive

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
)

// DirSink unpacks into a local directory through an os.Root, so that no
// entry can reach outside it, even through a symlink already in it.
type DirSink struct{ Root *os.Root }

// Mkdir creates name and its parents, mode 0755.
func (d DirSink) Mkdir(_ context.Context, name string) error {
	return d.Root.MkdirAll(name, 0o755)
}

// WriteFile replaces name, creating missing parents (0755).
func (d DirSink) WriteFile(_ context.Context, name string, mode fs.FileMode, r io.Reader) error {
	if mode == 0 {
		mode = 0o644
	}
	if dir := path.Dir(name); dir != "." {
		if err := d.Root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := d.Root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	err = errors.Join(err, f.Close())
	if err == nil {
		err = d.Root.Chmod(name, mode)
	}
	return err
}

// DirSource archives a local directory through an os.Root.
type DirSource struct{ Root *os.Root }

// List describes name's entries (links described as links, not followed).
func (d DirSource) List(_ context.Context, name string) ([]Entry, error) {
	f, err := d.Root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(des))
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			continue // removed while listing
		}
		out = append(out, Entry{Name: de.Name(), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()})
	}
	return out, nil
}

// Open opens file name.
func (d DirSource) Open(_ context.Context, name string) (io.ReadCloser, error) {
	return d.Root.Open(name)
}
