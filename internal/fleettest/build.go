package fleettest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// BinEnv names a directory holding already built hostd and agentbox
// binaries (`make fleet` passes bin/); unset, the kit builds them.
const BinEnv = "AGENTBOX_FLEET_BIN"

var build struct {
	once sync.Once
	dir  string
	err  error
}

// Binaries returns the directory of the hostd and agentbox binaries:
// $AGENTBOX_FLEET_BIN, or a temporary directory they are built into from
// this checkout, once per process (RemoveBinaries deletes it).
func Binaries(ctx context.Context) (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		return d, nil
	}
	build.once.Do(func() { build.dir, build.err = buildBinaries(ctx) })
	return build.dir, build.err
}

// RemoveBinaries deletes the binaries Binaries built (a TestMain calls it
// after m.Run).
func RemoveBinaries() {
	if build.dir != "" && os.Getenv(BinEnv) == "" {
		_ = os.RemoveAll(build.dir)
	}
}

func buildBinaries(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("fleettest: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir, err := os.MkdirTemp("", "agentbox-fleet-bin-")
	if err != nil {
		return "", fmt.Errorf("fleettest: %w", err)
	}
	for _, b := range []string{"hostd", "agentbox"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, b), "./cmd/"+b)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("fleettest: go build ./cmd/%s: %w: %s", b, err, out)
		}
	}
	// hostd finds the initramfs beside itself unless AGENTBOX_INITRAMFS says.
	if src := filepath.Join(root, "bin", "initramfs.cpio"); fileExists(src) {
		_ = os.Symlink(src, filepath.Join(dir, "initramfs.cpio"))
	}
	return dir, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
