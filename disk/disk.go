// Package disk manages sandbox disks: copy-on-write qcow2 overlays on a
// read-only base image, created and inspected with qemu-img.
package disk

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// A base never seen (a snapshot's fresh layer, at every fork) gets a
	// fresh overlay of another base of the same virtual size, renamed.
	virtual, vok := virtualSize(abs)
	shape := overlayKey{size: size, baseSize: virtual}
	if b, ok := overlays.get(shape); vok && ok {
		if nb, err := rebase(b, abs); err == nil {
			overlays.put(key, nb)
			return writeNew(path, nb)
		}
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
		if _, err := rebase(b, abs); vok && err == nil { // a layout rebase can rename
			overlays.put(shape, b)
		}
	}
	return nil
}

// qcow2 header fields (big-endian; the qcow2 spec in QEMU's docs):
// magic at 0, the backing file name's offset (u64) at 8 and length (u32)
// at 16, cluster_bits (u32) at 20, the virtual size (u64) at 24.
const (
	qcowMagic       = "QFI\xfb"
	qcowHeaderBytes = 32
)

// virtualSize reads the virtual size of the qcow2 image at path from its
// header; ok is false for a file that is not qcow2.
func virtualSize(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	h := make([]byte, qcowHeaderBytes)
	if _, err := io.ReadFull(f, h); err != nil || string(h[:4]) != qcowMagic {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(h[24:32])), true
}

// rebase returns a copy of fresh, a fresh overlay that qemu-img made, with
// its backing file renamed to base. Two fresh overlays of the same size and
// backing format differ only there: qemu-img writes the name last in the
// first cluster, after the header and its extensions, and leaves the rest
// of that cluster zero. rebase checks that layout and refuses anything else.
func rebase(fresh []byte, base string) ([]byte, error) {
	if len(fresh) < qcowHeaderBytes || string(fresh[:4]) != qcowMagic {
		return nil, errors.New("disk: not a qcow2 overlay")
	}
	off := binary.BigEndian.Uint64(fresh[8:16])
	n := uint64(binary.BigEndian.Uint32(fresh[16:20]))
	bits := binary.BigEndian.Uint32(fresh[20:24])
	if bits < 9 || bits > 21 || off < qcowHeaderBytes || n == 0 {
		return nil, errors.New("disk: not a fresh overlay with a backing file")
	}
	cluster := uint64(1) << bits
	if off+n > cluster || off+uint64(len(base)) > cluster || uint64(len(fresh)) < cluster ||
		len(bytes.TrimLeft(fresh[off+n:cluster], "\x00")) != 0 {
		return nil, errors.New("disk: the backing file name is not last in the first cluster")
	}
	out := bytes.Clone(fresh)
	clear(out[off : off+n])
	copy(out[off:], base)
	binary.BigEndian.PutUint32(out[16:20], uint32(len(base)))
	return out, nil
}

// overlayKey names the fresh overlays that are alike: of one base (at its
// size and time), or, with base empty, of any base of virtual size
// baseSize (to be renamed by rebase).
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

// Rebase points the qcow2 image at path at backing (a qcow2 image)
// without touching its data (qemu-img rebase -u): for an image moved to
// another directory or host, whose backing file moved too.
func Rebase(ctx context.Context, path, backing string) error {
	abs, err := filepath.Abs(backing)
	if err != nil {
		return err
	}
	if _, err := qemuImg(ctx, "rebase", "-u", "-f", "qcow2", "-F", "qcow2", "-b", abs, path); err != nil {
		return fmt.Errorf("disk: rebase %s onto %s: %w", path, abs, err)
	}
	return nil
}
