package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/images/imageconfig"
)

// DefaultFreeMiB is the free space of a base's filesystem by default.
const DefaultFreeMiB = 1024

// metaOverheadMiB is added to the files' size for the filesystem's own
// metadata (inode tables, journal).
const metaOverheadMiB = 64

// Base is a read-only qcow2 base made from an image.
type Base struct {
	// Path is the qcow2 file.
	Path string `json:"-"`
	// Digest is the image's config digest (its id), the cache key.
	Digest string             `json:"digest"`
	Ref    string             `json:"ref"`
	Config imageconfig.Config `json:"config"`
	// SizeMiB is the filesystem's size.
	SizeMiB int64 `json:"size_mib"`
	// Cached says the base was already made.
	Cached bool `json:"-"`
}

// Builder makes bases in Dir, one per image digest and free space.
type Builder struct {
	Dir string
	// MaxBytes, if set, bounds an image's unpacked size (the disk limit).
	MaxBytes int64

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// BuildOptions are the choices of one base.
type BuildOptions struct {
	// FreeMiB is the free space of the filesystem (0: DefaultFreeMiB).
	FreeMiB  int64
	Progress func(Progress)
}

// lock serializes the builds of one key.
func (b *Builder) lock(key string) func() {
	b.mu.Lock()
	if b.locks == nil {
		b.locks = map[string]*sync.Mutex{}
	}
	l := b.locks[key]
	if l == nil {
		l = &sync.Mutex{}
		b.locks[key] = l
	}
	b.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Build returns img's base, making it if it is not cached. A failed build
// leaves nothing behind.
func (b *Builder) Build(ctx context.Context, img *Image, opts BuildOptions) (Base, error) {
	if opts.FreeMiB <= 0 {
		opts.FreeMiB = DefaultFreeMiB
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(Progress) {}
	}
	id, err := img.ConfigName()
	if err != nil {
		return Base{}, fmt.Errorf("%w: config digest: %w", ErrNotImage, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Base{}, fmt.Errorf("%w: config: %w", ErrNotImage, err)
	}
	key := fmt.Sprintf("%s-%dm", id.Hex, opts.FreeMiB)
	defer b.lock(key)()
	final := filepath.Join(b.Dir, key+".qcow2")
	if base, err := b.cached(key); err == nil {
		base.Ref = img.Ref
		progress(Progress{Phase: PhaseCached})
		return base, nil
	}
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return Base{}, err
	}
	tmp, err := os.MkdirTemp(b.Dir, ".build-")
	if err != nil {
		return Base{}, err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "root")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return Base{}, err
	}
	used, err := Flatten(ctx, img, tree, FlattenOptions{MaxBytes: b.MaxBytes, Progress: progress})
	if err != nil {
		return Base{}, err
	}
	if err := guestDirs(tree); err != nil {
		return Base{}, err
	}
	progress(Progress{Phase: PhaseBuild})
	base := Base{Path: final, Digest: id.String(), Ref: img.Ref, Config: ConfigOf(cf),
		SizeMiB: used>>20 + used>>23 + metaOverheadMiB + opts.FreeMiB}
	qcow := filepath.Join(tmp, "base.qcow2")
	if err := makeImage(ctx, tree, filepath.Join(tmp, "root.ext4"), qcow, base.SizeMiB); err != nil {
		return Base{}, err
	}
	meta, err := json.Marshal(base)
	if err != nil {
		return Base{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), meta, 0o444); err != nil {
		return Base{}, err
	}
	// The qcow2 first, its metadata last: a base is complete once its
	// metadata file exists.
	if err := os.Rename(qcow, final); err != nil {
		return Base{}, err
	}
	if err := os.Rename(filepath.Join(tmp, "meta.json"), filepath.Join(b.Dir, key+".json")); err != nil {
		return Base{}, errors.Join(err, os.Remove(final))
	}
	return base, nil
}

// cached returns the complete base of key, if there is one.
func (b *Builder) cached(key string) (Base, error) {
	raw, err := os.ReadFile(filepath.Join(b.Dir, key+".json"))
	if err != nil {
		return Base{}, err
	}
	var base Base
	if err := json.Unmarshal(raw, &base); err != nil {
		return Base{}, err
	}
	base.Path = filepath.Join(b.Dir, key+".qcow2")
	if _, err := os.Stat(base.Path); err != nil {
		return Base{}, err
	}
	base.Cached = true
	return base, nil
}

// guestDirs adds what guestinit and exec need in any root: mount points,
// /etc for resolv.conf and the identity, /tmp and /root (the default
// working directory). What the image has is left as it is.
func guestDirs(tree string) error {
	for _, d := range []struct {
		name string
		mode fs.FileMode
	}{{"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"run", 0o755}, {"etc", 0o755}, {"tmp", 0o1777}, {"root", 0o700}} {
		p := filepath.Join(tree, d.name)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := os.Mkdir(p, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil { // past the umask
			return err
		}
	}
	return nil
}

// makeImage makes an ext4 filesystem of sizeMiB holding tree, then the
// read-only qcow2 out from it.
func makeImage(ctx context.Context, tree, raw, out string, sizeMiB int64) error {
	f, err := os.Create(raw)
	if err != nil {
		return err
	}
	err = f.Truncate(sizeMiB << 20)
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	// Inode tables and the journal are zeroed now (qemu-img skips the
	// zeros), so the guest does not write them into every overlay.
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-L", "agentbox-root", "-d", tree,
		"-E", "lazy_itable_init=0,lazy_journal_init=0", raw); err != nil {
		return err
	}
	if err := run(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, out); err != nil {
		return err
	}
	return os.Chmod(out, 0o444)
}

func run(ctx context.Context, bin string, args ...string) error {
	path, err := exec.LookPath(bin)
	if err != nil {
		return fmt.Errorf("%s not found (install Debian's e2fsprogs and qemu-utils): %w", bin, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", bin, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// Sweep removes what builds interrupted by a crash left in Dir (call it
// before any build starts).
func (b *Builder) Sweep() error {
	left, err := filepath.Glob(filepath.Join(b.Dir, ".build-*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range left {
		errs = append(errs, os.RemoveAll(p))
	}
	return errors.Join(errs...)
}
