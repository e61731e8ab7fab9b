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
	"sync"
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
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("disk: base image: %w", err)
	}
	// A fresh overlay's bytes depend only on its base and size: the first
	// one of each is made by qemu-img, the rest are copies of it (a copy of
	// a few hundred KiB instead of a qemu-img process on every create).
	key := overlayKey{base: abs, size: size, baseSize: fi.Size(), baseMod: fi.ModTime().UnixNano()}
	if b, ok := overlays.get(key); ok {
		return writeNew(path, b)
	}
	args := []string{"create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", abs, "-o", "cluster_size=65536", path}
	if size > 0 {
		args = append(args, strconv.FormatInt(size, 10))
	}
	if _, err := qemuImg(ctx, args...); err != nil {
		return fmt.Errorf("disk: create overlay %s: %w", path, err)
	}
	if b, err := os.ReadFile(path); err == nil && len(b) <= maxCachedOverlay {
		overlays.put(key, b)
	}
	return nil
}

// overlayKey names the fresh overlays that are alike.
type overlayKey struct {
	base              string
	size              int64
	baseSize, baseMod int64
}

// maxCachedOverlay and maxCachedOverlays bound the cache of fresh overlays
// (one is ~200 KiB, mostly zeros).
const (
	maxCachedOverlay  = 1 << 20
	maxCachedOverlays = 64
)

// overlayCache holds the bytes of one fresh overlay per key.
type overlayCache struct {
	mu sync.Mutex
	m  map[overlayKey][]byte
}

var overlays overlayCache

func (c *overlayCache) get(k overlayKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[k]
	return b, ok
}

func (c *overlayCache) put(k overlayKey, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedOverlays {
		c.m = map[overlayKey][]byte{} // start over: bases come and go
	}
	c.m[k] = b
}

// writeNew writes b to a new file at path.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("disk: create overlay %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(path)
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
