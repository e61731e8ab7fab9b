package archive_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/archive"
)

type entry struct {
	name, body, link string
	typ              byte
}

func mkTar(t testing.TB, ents ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandboxDirs returns a parent directory and the target dir inside it, so
// a test can check that nothing outside the target was written.
func sandboxDirs(t testing.TB) (parent, dir string, root *os.Root) {
	parent = t.TempDir()
	dir = filepath.Join(parent, "target")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return parent, dir, root
}

// outside lists the paths under parent that are not under dir.
func outside(t testing.TB, parent, dir string) []string {
	var out []string
	filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
		if p != parent && p != dir && !strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestExtractRefusesHostileEntries(t *testing.T) {
	cases := []struct {
		name  string
		ents  []entry
		entry string // the entry the error must name
	}{
		{"dotdot", []entry{{name: "ok.txt", body: "fine", typ: tar.TypeReg}, {name: "../x", body: "evil", typ: tar.TypeReg}}, "../x"},
		{"nested dotdot", []entry{{name: "a/../../x", body: "evil", typ: tar.TypeReg}}, "a/../../x"},
		{"absolute", []entry{{name: "/abs", body: "evil", typ: tar.TypeReg}}, "/abs"},
		{"symlink then through it", []entry{{name: "a", link: "/etc", typ: tar.TypeSymlink}, {name: "a/passwd", body: "evil", typ: tar.TypeReg}}, "a/passwd"},
		{"relative symlink out then through it", []entry{{name: "up", link: "../..", typ: tar.TypeSymlink}, {name: "up/x", body: "evil", typ: tar.TypeReg}}, "up/x"},
		{"dir through a symlink", []entry{{name: "d", link: "..", typ: tar.TypeSymlink}, {name: "d/sub/", typ: tar.TypeDir}}, "d/sub/"},
		{"symlink over a symlink's child", []entry{{name: "d", link: "/", typ: tar.TypeSymlink}, {name: "d/etc", link: "/tmp", typ: tar.TypeSymlink}}, "d/etc"},
		{"file replacing a symlink", []entry{{name: "l", link: "../outside.txt", typ: tar.TypeSymlink}, {name: "l", body: "evil", typ: tar.TypeReg}}, "l"},
		{"hard link outside", []entry{{name: "h", link: "../outside.txt", typ: tar.TypeLink}}, "h"},
		{"hard link absolute", []entry{{name: "h", link: "/etc/passwd", typ: tar.TypeLink}}, "h"},
		{"hard link through a symlink", []entry{{name: "e", link: "/etc", typ: tar.TypeSymlink}, {name: "h", link: "e/passwd", typ: tar.TypeLink}}, "h"},
		{"device", []entry{{name: "dev", typ: tar.TypeChar}}, "dev"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, dir, root := sandboxDirs(t)
			os.WriteFile(filepath.Join(parent, "outside.txt"), []byte("keep"), 0o644)
			_, err := archive.Extract(context.Background(), bytes.NewReader(mkTar(t, tc.ents...)), archive.DirSink{Root: root})
			if !errors.Is(err, archive.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), `"`+tc.entry+`"`) {
				t.Errorf("error %q does not name entry %q", err, tc.entry)
			}
			if got := outside(t, parent, dir); len(got) != 1 || got[0] != filepath.Join(parent, "outside.txt") {
				t.Errorf("paths outside the target: %v", got)
			}
			if b, _ := os.ReadFile(filepath.Join(parent, "outside.txt")); string(b) != "keep" {
				t.Errorf("outside.txt = %q", b)
			}
		})
	}
}

func TestDirSinkRefusesExistingSymlinkEscape(t *testing.T) {
	parent, dir, root := sandboxDirs(t)
	if err := os.Symlink(parent, filepath.Join(dir, "esc")); err != nil {
		t.Fatal(err)
	}
	_, err := archive.Extract(context.Background(), bytes.NewReader(mkTar(t, entry{name: "esc/x", body: "evil", typ: tar.TypeReg})), archive.DirSink{Root: root})
	if err == nil || !strings.Contains(err.Error(), `"esc/x"`) {
		t.Fatalf("err = %v, want a refusal naming esc/x", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "x")); !os.IsNotExist(err) {
		t.Errorf("x was written outside: %v", err)
	}
}

func TestRoundTripGzip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(src, "top.txt"), []byte("top"), 0o600)
	os.WriteFile(filepath.Join(src, "a", "b", "deep.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.Mkdir(filepath.Join(src, "empty"), 0o755)
	os.Symlink("top.txt", filepath.Join(src, "link"))
	os.Symlink("/etc/hostname", filepath.Join(src, "abs")) // only data: carried as is
	sroot, err := os.OpenRoot(src)
	if err != nil {
		t.Fatal(err)
	}
	defer sroot.Close()
	var tarBuf bytes.Buffer
	zw := gzip.NewWriter(&tarBuf)
	if err := archive.Write(context.Background(), zw, archive.DirSource{Root: sroot}); err != nil {
		t.Fatal(err)
	}
	zw.Close()

	_, dir, root := sandboxDirs(t)
	res, err := archive.Extract(context.Background(), &tarBuf, archive.DirSink{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 7 || res.Bytes != int64(len("top")+len("#!/bin/sh\necho hi\n")) {
		t.Errorf("result = %+v", res)
	}
	for name, want := range map[string]string{"top.txt": "top", "a/b/deep.sh": "#!/bin/sh\necho hi\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", name, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "a/b/deep.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("deep.sh mode: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty dir: %v", err)
	}
	for name, want := range map[string]string{"link": "top.txt", "abs": "/etc/hostname"} {
		if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != want {
			t.Errorf("symlink %s -> %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestWriteNamesAreRelative(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "f"), []byte("x"), 0o644)
	root, _ := os.OpenRoot(src)
	defer root.Close()
	var buf bytes.Buffer
	if err := archive.Write(context.Background(), &buf, archive.DirSource{Root: root}); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "d/,d/f" {
		t.Errorf("names = %v", names)
	}
}

func TestExtractHardLinkInside(t *testing.T) {
	_, dir, root := sandboxDirs(t)
	body := mkTar(t, entry{name: "f", body: "data", typ: tar.TypeReg}, entry{name: "sub/h", link: "f", typ: tar.TypeLink})
	if _, err := archive.Extract(context.Background(), bytes.NewReader(body), archive.DirSink{Root: root}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "h")); err != nil || string(b) != "data" {
		t.Errorf("sub/h = %q, %v", b, err)
	}
}
