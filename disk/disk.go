// Package disk manages sandbox disks: copy-on-write qcow2 overlays on a
// read-only base image, created and inspected with qemu-img.
package disk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// ErrNoQemuImg is returned when qemu-img is not installed.
var ErrNoQemuImg = errors.New("disk: qemu-img not found (install Debian's qemu-utils)")

// CreateOverlay creates a qcow2 overlay at path whose backing file is base
// (a qcow2 image). A size of 0 keeps the base's virtual size.
func CreateOverlay(ctx context.Context, base, path string, size int64) error {
	abs, err := filepath.Abs(base)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("disk: base image: %w", err)
	}
	args := []string{"create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", abs, "-o", "cluster_size=65536", path}
	if size > 0 {
		args = append(args, strconv.FormatInt(size, 10))
	}
	if _, err := qemuImg(ctx, args...); err != nil {
		return fmt.Errorf("disk: create overlay %s: %w", path, err)
	}
	return nil
}

// Info is what qemu-img reports about an image.
type Info struct {
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	ActualSize      int64  `json:"actual-size"`
	BackingFilename string `json:"full-backing-filename"`
}

// Inspect describes an image.
func Inspect(ctx context.Context, path string) (Info, error) {
	out, err := qemuImg(ctx, "info", "--output=json", "-U", path)
	if err != nil {
		return Info{}, fmt.Errorf("disk: inspect %s: %w", path, err)
	}
	var info Info
	if err := json.Unmarshal(out, &info); err != nil {
		return Info{}, fmt.Errorf("disk: inspect %s: %w", path, err)
	}
	return info, nil
}

func qemuImg(ctx context.Context, args ...string) ([]byte, error) {
	bin, err := exec.LookPath("qemu-img")
	if err != nil {
		return nil, ErrNoQemuImg
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("qemu-img %s: %w: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}
