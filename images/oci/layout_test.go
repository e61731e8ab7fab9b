package oci_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/images/oci"
)

// TestWriteLayout makes a layout the way images/build-template.sh does
// (GNU tar of a tree, zstd, WriteLayout), opens it as an --image source
// would and flattens it back: files, modes, links and config survive.
func TestWriteLayout(t *testing.T) {
	for _, tool := range []string{"tar", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (ci/install-deps.sh installs it): %v", tool, err)
		}
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	for _, d := range []string{"usr/bin", "etc"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(filepath.Join(tree, "usr/bin/tool"), []byte("#!/bin/sh\necho tool\n"), 0o755))
	must(t, os.Link(filepath.Join(tree, "usr/bin/tool"), filepath.Join(tree, "usr/bin/tool2")))
	must(t, os.Symlink("usr/bin", filepath.Join(tree, "bin")))
	must(t, os.WriteFile(filepath.Join(tree, "etc/motd"), []byte("hello\n"), 0o600))

	for _, comp := range []string{"plain", "zstd"} {
		t.Run(comp, func(t *testing.T) {
			layer := filepath.Join(dir, comp+".tar")
			cmd := "tar --numeric-owner -C " + tree + " -cf " + layer + " ."
			if comp == "zstd" {
				cmd = "tar --numeric-owner -C " + tree + " -cf - . | zstd -q -T0 -3 -o " + layer
			}
			if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, out)
			}
			out := filepath.Join(dir, comp+".oci")
			cfg := v1.Config{Env: []string{"PATH=/usr/bin", "A=b"}, WorkingDir: "/root", Cmd: []string{"tool"}}
			id, err := oci.WriteLayout(out, layer, cfg)
			if err != nil {
				t.Fatal(err)
			}
			img, err := oci.Open(context.Background(), out, oci.SourceOptions{LocalRoots: []string{dir}})
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := img.ConfigName(); got != id || img.Kind != oci.KindLayout {
				t.Errorf("opened %s %s, want layout %s", img.Kind, got, id)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if c := oci.ConfigOf(cf); c.Env["A"] != "b" || c.WorkingDir != "/root" || !slices.Equal(c.Cmd, []string{"tool"}) || cf.Architecture != "amd64" {
				t.Errorf("config: %+v (%s/%s)", c, cf.OS, cf.Architecture)
			}
			root := filepath.Join(dir, comp+".root")
			must(t, os.Mkdir(root, 0o755))
			if _, err := oci.Flatten(context.Background(), img, root, oci.FlattenOptions{}); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(root, "bin/tool")); err != nil || string(b) != "#!/bin/sh\necho tool\n" {
				t.Errorf("bin/tool through the symlink: %q, %v", b, err)
			}
			a, _ := os.Stat(filepath.Join(root, "usr/bin/tool"))
			b, _ := os.Stat(filepath.Join(root, "usr/bin/tool2"))
			if a == nil || b == nil || a.Mode().Perm() != 0o755 || a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
				t.Errorf("hard link or mode lost: %v %v", a, b)
			}
			if fi, err := os.Stat(filepath.Join(root, "etc/motd")); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("etc/motd: %v, %v", fi, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
