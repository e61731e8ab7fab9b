package archive_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/archive"
)

// modelSink checks every call Extract makes against the package's rules:
// names are clean and local, and nothing is written at or through a
// symlink the archive made (nor hard-linked to a path through one).
type modelSink struct {
	t     *testing.T
	links map[string]bool
}

func (m *modelSink) check(op, name string) {
	m.t.Helper()
	if c, err := archive.CheckName(name); err != nil || c != name {
		m.t.Fatalf("%s got name %q, not clean and local", op, name)
	}
	for p := name; ; {
		if m.links[p] {
			m.t.Fatalf("%s %q goes through the archive's symlink %q", op, name, p)
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return
		}
		p = p[:i]
	}
}

func (m *modelSink) Mkdir(_ context.Context, name string) error {
	if name != "." {
		m.check("Mkdir", name)
	}
	return nil
}

func (m *modelSink) WriteFile(_ context.Context, name string, mode fs.FileMode, r io.Reader) error {
	m.check("WriteFile", name)
	if mode&^fs.ModePerm != 0 {
		m.t.Fatalf("WriteFile %q with mode %v", name, mode)
	}
	_, err := io.Copy(io.Discard, r)
	return err
}

func (m *modelSink) Symlink(_ context.Context, name, target string) error {
	m.check("Symlink", name)
	m.links[name] = true
	return nil
}

func (m *modelSink) Link(_ context.Context, name, target string) error {
	m.check("Link", name)
	m.check("Link target", target)
	return nil
}

func addArchiveSeeds(f *testing.F) {
	for _, ents := range [][]entry{
		{{name: "a/", typ: tar.TypeDir}, {name: "a/f", body: "x", typ: tar.TypeReg}},
		{{name: "l", link: "/etc", typ: tar.TypeSymlink}, {name: "l/passwd", body: "x", typ: tar.TypeReg}},
		{{name: "l", link: "/etc", typ: tar.TypeSymlink}, {name: "./l//passwd", body: "x", typ: tar.TypeReg}},
		{{name: "l", link: "..", typ: tar.TypeSymlink}, {name: "h", link: "l/x", typ: tar.TypeLink}},
		{{name: "d/l", link: "/", typ: tar.TypeSymlink}, {name: "d/l", body: "over", typ: tar.TypeReg}},
		{{name: "../x", body: "x", typ: tar.TypeReg}},
		{{name: "/abs", body: "x", typ: tar.TypeReg}},
		{{name: "f", body: "x", typ: tar.TypeReg}, {name: "h", link: "../f", typ: tar.TypeLink}},
		{{name: ".", typ: tar.TypeDir}, {name: "p", typ: tar.TypeFifo}},
	} {
		f.Add(mkTar(f, ents...))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(mkTar(f, entry{name: "z", body: "zipped", typ: tar.TypeReg}))
	zw.Close()
	f.Add(gz.Bytes())
	f.Add([]byte("\x1f\x8bnot gzip"))
	f.Add([]byte{})
}

// FuzzExtract unpacks any (gzip) tar stream twice: through a sink that
// checks each call against the rules, and into a real directory, outside
// of which nothing may appear. Every failure is an error, never a panic,
// and a malformed archive's error wraps ErrInvalid.
func FuzzExtract(f *testing.F) {
	addArchiveSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		_, err := archive.Extract(ctx, bytes.NewReader(data), &modelSink{t: t, links: map[string]bool{}})
		if err != nil && !errors.Is(err, archive.ErrInvalid) {
			t.Fatalf("model sink: %v does not wrap ErrInvalid", err)
		}
		parent, dir, root := sandboxDirs(t)
		_, _ = archive.Extract(ctx, bytes.NewReader(data), archive.DirSink{Root: root}) // os.Root errors are fine
		if out := outside(t, parent, dir); len(out) > 0 {
			t.Fatalf("written outside the target: %v", out)
		}
	})
}
