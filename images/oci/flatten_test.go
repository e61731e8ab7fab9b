package oci_test

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/images/oci"
)

// want describes one path of a flattened tree: its content ("" with
// absent for a path that must not exist), a symlink target, or a path it
// must be a hard link of.
type want struct {
	path    string
	content string
	symlink string
	sameAs  string
	absent  bool
	mode    os.FileMode
	uid     int
	xattr   [2]string
}

func TestFlatten(t *testing.T) {
	long := strings.Repeat("d", 120) + "/" + strings.Repeat("f", 200)
	cases := []struct {
		name    string
		layers  [][]ent
		want    []want
		wantErr error
	}{{
		name: "files, modes, owners, xattrs, long names",
		layers: [][]ent{{dir("etc"), file("etc/motd", "hi"),
			{name: "bin/tool", body: "x", mode: 0o4755, uid: 1000},
			{name: "etc/cap", body: "c", pax: map[string]string{"SCHILY.xattr.user.agentbox": "v1"}},
			file(long, "long")}},
		want: []want{{path: "etc/motd", content: "hi"}, {path: "bin/tool", content: "x", mode: 0o4755 | os.ModeSetuid, uid: 1000},
			{path: "etc/cap", content: "c", xattr: [2]string{"user.agentbox", "v1"}}, {path: long, content: "long"}},
	}, {
		name:   "upper layer replaces a file, a dir by a file, a symlink by a dir",
		layers: [][]ent{{file("a", "1"), dir("b"), file("b/x", "x"), symlink("c", "/etc")}, {file("a", "2"), file("b", "now a file"), dir("c"), file("c/y", "y")}},
		want:   []want{{path: "a", content: "2"}, {path: "b", content: "now a file"}, {path: "c/y", content: "y"}, {path: "etc/y", absent: true}},
	}, {
		name:   "whiteouts remove lower files and trees",
		layers: [][]ent{{file("keep", "k"), file("gone", "g"), dir("tree"), file("tree/f", "f")}, {file(".wh.gone", ""), file(".wh.tree", "")}},
		want:   []want{{path: "keep", content: "k"}, {path: "gone", absent: true}, {path: "tree", absent: true}, {path: ".wh.gone", absent: true}},
	}, {
		name: "opaque dir hides lower entries, keeps its own layer's",
		layers: [][]ent{{dir("d"), file("d/old", "o"), dir("d/sub"), file("d/sub/x", "x")},
			{dir("d"), file("d/new", "n"), file("d/.wh..wh..opq", "")}},
		want: []want{{path: "d/new", content: "n"}, {path: "d/old", absent: true}, {path: "d/sub", absent: true}, {path: "d/.wh..wh..opq", absent: true}},
	}, {
		name:   "hard links, within a layer and to a lower one",
		layers: [][]ent{{file("bin/busybox", "bb"), hardlink("bin/sh", "bin/busybox")}, {hardlink("usr/bin/ash", "/bin/busybox")}},
		want:   []want{{path: "bin/sh", sameAs: "bin/busybox"}, {path: "usr/bin/ash", sameAs: "bin/busybox"}},
	}, {
		name:   "symlinks are data, never followed out of the root",
		layers: [][]ent{{symlink("out", "/"), symlink("up", "../../../../.."), symlink("lib", "usr/lib")}, {file("out/etc/evil", "e"), file("up/evil2", "e2"), file("lib/libc.so", "c")}},
		want: []want{{path: "out", symlink: "/"}, {path: "etc/evil", content: "e"}, {path: "evil2", content: "e2"},
			{path: "usr/lib/libc.so", content: "c"}},
	}, {
		name:    "an entry climbing out with ../ is refused",
		layers:  [][]ent{{file("../escape", "x")}},
		wantErr: oci.ErrUnsafePath,
	}, {
		name:    "a nested ../ is refused",
		layers:  [][]ent{{file("a/../../escape", "x")}},
		wantErr: oci.ErrUnsafePath,
	}, {
		name:    "a hard link out of the root is refused",
		layers:  [][]ent{{hardlink("passwd", "../../../etc/passwd")}},
		wantErr: oci.ErrUnsafePath,
	}, {
		name:   "absolute entry names stay inside",
		layers: [][]ent{{file("/abs/file", "a")}},
		want:   []want{{path: "abs/file", content: "a"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "root")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			var ls []v1.Layer
			for _, l := range tc.layers {
				ls = append(ls, layer(t, l...))
			}
			_, err := oci.Flatten(context.Background(), image(t, v1.Config{}, ls...), root, oci.FlattenOptions{})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, want %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				check(t, root, w)
			}
			assertOnly(t, base, "root")
		})
	}
}

// assertOnly fails if dir holds anything but name: nothing was written
// outside the root.
func assertOnly(t *testing.T, dir, name string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != name {
			t.Errorf("%s written outside the root", e.Name())
		}
	}
}

func check(t *testing.T, root string, w want) {
	t.Helper()
	p := filepath.Join(root, w.path)
	fi, err := os.Lstat(p)
	if w.absent {
		if err == nil {
			t.Errorf("%s exists, want it absent", w.path)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %v", w.path, err)
		return
	}
	switch {
	case w.symlink != "":
		if got, _ := os.Readlink(p); got != w.symlink {
			t.Errorf("%s: link to %q, want %q", w.path, got, w.symlink)
		}
	case w.sameAs != "":
		other, err := os.Stat(filepath.Join(root, w.sameAs))
		if err != nil || !os.SameFile(fi, other) {
			t.Errorf("%s: not a hard link of %s (%v)", w.path, w.sameAs, err)
		}
	default:
		if b, _ := os.ReadFile(p); string(b) != w.content {
			t.Errorf("%s: %q, want %q", w.path, b, w.content)
		}
	}
	if w.mode != 0 && fi.Mode()&(os.ModePerm|os.ModeSetuid) != w.mode&(os.ModePerm|os.ModeSetuid) {
		t.Errorf("%s: mode %v, want %v", w.path, fi.Mode(), w.mode)
	}
	if w.uid != 0 && os.Geteuid() == 0 {
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != w.uid {
			t.Errorf("%s: uid %d, want %d", w.path, st.Uid, w.uid)
		}
	}
	if w.xattr[0] != "" {
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(p, w.xattr[0], buf)
		if err != nil || string(buf[:n]) != w.xattr[1] {
			t.Errorf("%s: xattr %s = %q (%v), want %q", w.path, w.xattr[0], buf[:max(n, 0)], err, w.xattr[1])
		}
	}
}

func TestFlattenDeviceNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of a device needs root")
	}
	root := t.TempDir()
	img := image(t, v1.Config{}, layer(t, ent{name: "dev/null", typ: tar.TypeChar, mode: 0o666}, ent{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600}))
	if _, err := oci.Flatten(context.Background(), img, root, oci.FlattenOptions{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(root, "dev/null"))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("dev/null: %v, %v; want a character device", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "run/fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("run/fifo: %v; want a fifo", err)
	}
}

func TestFlattenTooLarge(t *testing.T) {
	img := image(t, v1.Config{}, layer(t, file("big", strings.Repeat("x", 1<<20))))
	_, err := oci.Flatten(context.Background(), img, t.TempDir(), oci.FlattenOptions{MaxBytes: 512 << 10})
	if !errors.Is(err, oci.ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}
