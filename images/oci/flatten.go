package oci

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// Errors of a flatten; each wraps the reason.
var (
	// ErrUnsafePath refuses a layer entry whose name or hard link target
	// leaves the root ("../", a link out of it).
	ErrUnsafePath = errors.New("oci: layer entry escapes the root")
	// ErrTooLarge refuses an image larger than the disk limit.
	ErrTooLarge = errors.New("oci: image larger than the disk limit")
	// ErrDigest refuses a layer whose content does not match its digest.
	ErrDigest = errors.New("oci: layer digest mismatch")
	// ErrNotImage refuses input that is not an image.
	ErrNotImage = errors.New("oci: not an image")
)

// Whiteout names of the OCI image spec's layer format.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// entryOverhead is what each entry is counted for besides its data (an
// inode and a directory entry, roughly), against the size limit.
const entryOverhead = 4096

// FlattenOptions bound a flatten.
type FlattenOptions struct {
	// MaxBytes, if set, is the most the unpacked tree may take.
	MaxBytes int64
	// Progress, if set, is told of each layer done.
	Progress func(Progress)
}

// Flatten applies img's layers, bottom first, to dir (which must exist and
// be empty), checking each layer's content against the diff id of the image
// config. It returns the bytes the tree takes (by the count above).
func Flatten(ctx context.Context, img v1.Image, dir string, opts FlattenOptions) (int64, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return 0, fmt.Errorf("%w: config: %w", ErrNotImage, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return 0, fmt.Errorf("%w: layers: %w", ErrNotImage, err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return 0, fmt.Errorf("%w: %d layers but %d diff ids in the config", ErrNotImage, len(layers), len(cf.RootFS.DiffIDs))
	}
	a := &applier{root: dir, max: opts.MaxBytes, ctx: ctx}
	for i, l := range layers {
		if err := a.layer(l, cf.RootFS.DiffIDs[i]); err != nil {
			return a.used, fmt.Errorf("layer %d of %d: %w", i+1, len(layers), err)
		}
		if opts.Progress != nil {
			opts.Progress(Progress{Phase: PhaseUnpack, Current: int64(i + 1), Total: int64(len(layers))})
		}
	}
	return a.used, nil
}

// applier applies layers to root.
type applier struct {
	ctx  context.Context
	root string
	max  int64
	used int64
	// made holds the paths the current layer created, which its own
	// whiteouts and opaque markers leave alone.
	made map[string]bool
}

// layer applies one layer, hashing its uncompressed stream.
func (a *applier) layer(l v1.Layer, want v1.Hash) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer rc.Close()
	h := sha256.New()
	r := io.TeeReader(rc, h)
	if err := a.apply(tar.NewReader(r)); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil { // the tar's padding
		return fmt.Errorf("read: %w", err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if want.String() != got {
		return fmt.Errorf("%w: content is %s, the config says %s", ErrDigest, got, want)
	}
	return nil
}

// apply applies the entries of one layer's tar.
func (a *applier) apply(tr *tar.Reader) error {
	a.made = map[string]bool{}
	for {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: read tar: %w", ErrNotImage, err)
		}
		if err := a.entry(hdr, tr); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
}

// cleanName makes an entry name relative to the root ("" for the root
// itself), refusing one that climbs out of it.
func cleanName(name string) (string, error) {
	n := path.Clean("/" + name)
	if strings.Contains(name, "\x00") {
		return "", fmt.Errorf("%w: NUL in name", ErrUnsafePath)
	}
	// Clean("/"+name) drops leading ".." silently: check the name itself.
	rel := path.Clean(strings.TrimLeft(name, "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: %q", ErrUnsafePath, name)
	}
	return strings.TrimPrefix(n, "/"), nil
}

// resolve returns the host path of rel's parent (symlinks resolved inside
// the root only) joined with rel's last element, which is not resolved.
func (a *applier) resolve(rel string) (string, error) {
	parent, err := securejoin.SecureJoin(a.root, path.Dir(rel))
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, path.Base(rel)), nil
}

func (a *applier) charge(n int64) error {
	a.used += n + entryOverhead
	if a.max > 0 && a.used > a.max {
		return fmt.Errorf("%w: more than %d MiB unpacked", ErrTooLarge, a.max>>20)
	}
	return nil
}

func (a *applier) entry(hdr *tar.Header, r io.Reader) error {
	rel, err := cleanName(hdr.Name)
	if err != nil || rel == "" {
		return err // the root's own entry is skipped
	}
	base := path.Base(rel)
	switch {
	case base == opaqueMarker:
		return a.opaque(path.Dir(rel))
	case strings.HasPrefix(base, whiteoutPrefix):
		return a.whiteout(path.Join(path.Dir(rel), base[len(whiteoutPrefix):]))
	}
	if err := a.charge(hdr.Size); err != nil {
		return err
	}
	target, err := a.resolve(rel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if err := a.clear(target, hdr.Typeflag == tar.TypeDir); err != nil {
		return err
	}
	if err := a.create(hdr, r, target); err != nil {
		return err
	}
	a.made[rel] = true
	return setMeta(hdr, target)
}

// clear removes what a lower layer left at target, unless both are
// directories (the entry then updates the directory's metadata).
func (a *applier) clear(target string, dir bool) error {
	fi, err := os.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if dir && fi.IsDir() {
		return nil
	}
	return os.RemoveAll(target) // does not follow a symlink at target
}

func (a *applier) create(hdr *tar.Header, r io.Reader, target string) error {
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return nil
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives use TypeRegA
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, werr := io.Copy(f, io.LimitReader(r, hdr.Size))
		return errors.Join(werr, f.Close())
	case tar.TypeSymlink:
		// The target is data for the guest: never resolved here.
		return os.Symlink(hdr.Linkname, target)
	case tar.TypeLink:
		src, err := a.linkSource(hdr.Linkname)
		if err != nil {
			return err
		}
		return os.Link(src, target) // links a symlink itself, never its target
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
		dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
		if err := unix.Mknod(target, kind|mode, int(dev)); err != nil {
			return fmt.Errorf("mknod: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("%w: unsupported tar entry type %q", ErrNotImage, hdr.Typeflag)
	}
}

// linkSource resolves a hard link's target inside the root.
func (a *applier) linkSource(name string) (string, error) {
	rel, err := cleanName(name)
	if err != nil {
		return "", err
	}
	if rel == "" {
		return "", fmt.Errorf("%w: hard link to the root", ErrUnsafePath)
	}
	src, err := a.resolve(rel)
	if err != nil {
		return "", err
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return "", fmt.Errorf("hard link to %s: %w", name, err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%w: hard link to directory %s", ErrUnsafePath, name)
	}
	return src, nil
}

// setMeta sets owner, mode, xattrs and mtime; the owner before the mode,
// since chown clears the set-id bits.
func setMeta(hdr *tar.Header, target string) error {
	if os.Geteuid() == 0 {
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			if err := unix.Lsetxattr(target, name, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	if hdr.Typeflag != tar.TypeSymlink {
		if err := unix.Fchmodat(unix.AT_FDCWD, target, uint32(hdr.Mode&0o7777), 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("mtime: %w", err)
	}
	return nil
}

// whiteout removes rel as lower layers made it.
func (a *applier) whiteout(rel string) error {
	if a.made[rel] {
		return nil
	}
	target, err := a.resolve(rel)
	if err != nil {
		return err
	}
	return os.RemoveAll(target)
}

// opaque empties directory rel of what lower layers put there.
func (a *applier) opaque(rel string) error {
	dir, err := securejoin.SecureJoin(a.root, rel)
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if a.made[path.Join(rel, e.Name())] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
