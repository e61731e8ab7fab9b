package oci

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteLayout writes a one-layer linux/amd64 image to a new OCI layout
// directory dir: its layer is the tar file layerTar (plain, gzip or zstd;
// a compressed one is stored as it is, so it is read twice, not
// recompressed), its config cfg. The project's ready templates
// (images/build-template.sh) are made this way from a root tree. It
// returns the image's config digest (its id).
func WriteLayout(dir, layerTar string, cfg v1.Config) (v1.Hash, error) {
	opts := []tarball.LayerOption{tarball.WithMediaType(types.OCILayer)}
	if zstdFile(layerTar) {
		opts = []tarball.LayerOption{tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd)}
	}
	layer, err := tarball.LayerFromFile(layerTar, opts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("layer %s: %w", layerTar, err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return v1.Hash{}, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", "amd64", cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return v1.Hash{}, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", dir, err)
	}
	return img.ConfigName()
}

// zstdFile reports whether the file starts with zstd's magic number.
func zstdFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [4]byte
	n, _ := f.Read(b[:])
	return n == 4 && b == [4]byte{0x28, 0xb5, 0x2f, 0xfd}
}
