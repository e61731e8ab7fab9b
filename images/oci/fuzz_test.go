package oci_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentbox/agentbox/images/oci"
)

// FuzzFlatten applies two layers of any bytes (the second may white out
// the first's paths): no panic, nothing written outside the target
// directory, and the size it reports stays within MaxBytes.
func FuzzFlatten(f *testing.F) {
	f.Add(layerTar(f, []ent{dir("etc"), file("etc/a", "x"), symlink("l", "/etc")}), layerTar(f, []ent{file("etc/.wh.a", ""), file("l/b", "x")}))
	f.Add(layerTar(f, []ent{symlink("d", "..")}), layerTar(f, []ent{file("d/escape", "x"), hardlink("h", "../../x")}))
	f.Add(layerTar(f, []ent{file("../x", "x")}), layerTar(f, []ent{dir("a"), file("a/.wh..wh..opq", "")}))
	f.Add([]byte("not a tar"), []byte{})
	const max = 1 << 20
	f.Fuzz(func(t *testing.T, l1, l2 []byte) {
		var layers []v1.Layer
		for _, b := range [][]byte{l1, l2} {
			l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
			if err != nil {
				return
			}
			layers = append(layers, l)
		}
		img, err := mutate.AppendLayers(empty.Image, layers...)
		if err != nil {
			return // a layer whose digest cannot be taken is no image
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return
		}
		cf.OS, cf.Architecture = "linux", "amd64"
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return
		}
		parent := t.TempDir()
		dir := filepath.Join(parent, "rootfs")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n, err := oci.Flatten(context.Background(), img, dir, oci.FlattenOptions{MaxBytes: max})
		if err == nil && n > max {
			t.Fatalf("flattened %d bytes, over MaxBytes %d", n, max)
		}
		_ = filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
			if p != parent && p != dir && !strings.HasPrefix(p, dir+"/") {
				t.Fatalf("written outside the target: %s", p)
			}
			return nil
		})
	})
}
