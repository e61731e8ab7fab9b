//go:build vm

package sdktest

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/images/oci"
)

// suiteAssets are what the suites' image build and mount tests use: an OCI
// layout of Debian's static busybox under an import directory of hostd
// ($AGENTBOX_TEST_IMAGE) and a host directory under a mount root
// ($AGENTBOX_TEST_MOUNT_DIR, holding hello.txt).
type suiteAssets struct {
	image, mountDir string
}

func (a suiteAssets) tweak(cfg *hostd.Config) {
	cfg.Images.ImportDirs = append(cfg.Images.ImportDirs, filepath.Dir(a.image))
	cfg.MountRoots = append(cfg.MountRoots, filepath.Dir(a.mountDir))
}

func (a suiteAssets) env() []string {
	return []string{"AGENTBOX_TEST_IMAGE=" + a.image, "AGENTBOX_TEST_MOUNT_DIR=" + a.mountDir}
}

func makeSuiteAssets(t *testing.T) suiteAssets {
	t.Helper()
	dir := t.TempDir()
	a := suiteAssets{image: filepath.Join(dir, "images", "busybox"), mountDir: filepath.Join(dir, "mounts", "shared")}
	if err := os.MkdirAll(a.mountDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.mountDir, "hello.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is needed (ci/install-deps.sh installs it): %v", err)
	}
	layerTar := filepath.Join(dir, "layer.tar")
	f, err := os.Create(layerTar)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	mtime := time.Unix(1700000000, 0)
	hdrs := []*tar.Header{{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}}
	for _, app := range []string{"sh", "echo", "cat", "ls"} {
		hdrs = append(hdrs, &tar.Header{Name: "bin/" + app, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	}
	for _, h := range hdrs {
		h.ModTime = mtime
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Name == "bin/busybox" {
			if _, err := tw.Write(bb); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := oci.WriteLayout(a.image, layerTar, v1.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/"}); err != nil {
		t.Fatalf("write layout: %v", err)
	}
	return a
}
