package cloudhypervisor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/vmm"
)

// maxBackingDepth is the longest backing chain we accept: the number of
// backing files below a disk's top image. It equals Cloud Hypervisor's own
// limit (10 in v53.0), so that a chain we accept is one CH opens.
const maxBackingDepth = 10

// ErrBadImageChain is returned when a disk's image or backing chain is
// malformed, too deep, or leaves the data directories.
var ErrBadImageChain = errors.New("cloudhypervisor: bad disk image chain")

// qcow2 header layout (docs/interop/qcow2.txt in QEMU): every field is big
// endian. Version 2 headers are 72 bytes; version 3 adds fields up to
// header_length.
const (
	qcowMagic         = 0x514649fb // "QFI\xfb"
	qcowV2HeaderLen   = 72
	qcowMaxBackingLen = 1023 // QEMU refuses longer backing file names

	extEnd           = 0x00000000
	extBackingFormat = 0xe2792aca

	incompatDataFile = 1 << 2 // external data file: a path we would not check
)

// qcowHeader is what the chain check needs from one image.
type qcowHeader struct {
	backing       string // as stored; "" when the image has none
	backingFormat string // from the header extension; "" when absent
}

// imageChain checks the disk image at path and every backing file below it:
// each must resolve (after symlinks) inside one of roots, each backing file
// must be qcow2 or raw, and the chain must be at most maxBackingDepth deep.
// Relative backing names are resolved against the directory of the image
// that names them, as Cloud Hypervisor does. It returns the resolved paths,
// the top image first.
func imageChain(path string, raw bool, roots []string) ([]string, error) {
	var chain []string
	format := "qcow2"
	if raw {
		format = "raw"
	}
	for {
		resolved, err := insideRoots(path, roots)
		if err != nil {
			if len(chain) > 0 {
				return nil, fmt.Errorf("%w (backing file of %s)", err, chain[len(chain)-1])
			}
			return nil, err
		}
		chain = append(chain, resolved)
		if format == "raw" {
			return chain, nil
		}
		h, isQcow, err := readQcowHeader(resolved)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadImageChain, resolved, err)
		}
		if !isQcow {
			if len(chain) == 1 {
				return nil, fmt.Errorf("%w: %s: not a qcow2 image", ErrBadImageChain, resolved)
			}
			return chain, nil // an auto-detected raw backing file ends the chain
		}
		if h.backing == "" {
			return chain, nil
		}
		if len(chain) > maxBackingDepth {
			return nil, fmt.Errorf("%w: %s: more than %d backing files", ErrBadImageChain, chain[0], maxBackingDepth)
		}
		switch h.backingFormat {
		case "", "qcow2", "raw":
			format = h.backingFormat
		default:
			return nil, fmt.Errorf("%w: %s: backing format %q", ErrBadImageChain, resolved, h.backingFormat)
		}
		path = h.backing
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(resolved), path)
		}
	}
}

// insideRoots resolves path and checks that it is a regular file beneath one
// of roots (which are resolved already).
func insideRoots(path string, roots []string) (string, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadImageChain, err)
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadImageChain, err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadImageChain, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s: not a regular file", ErrBadImageChain, resolved)
	}
	for _, r := range roots {
		if rel, err := filepath.Rel(r, resolved); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return resolved, nil
		}
	}
	if resolved != path {
		resolved = fmt.Sprintf("%s (from %s)", resolved, path)
	}
	return "", fmt.Errorf("%w: %s is outside the data directories %v", ErrBadImageChain, resolved, roots)
}

// readQcowHeader reads the header of the image at path. isQcow is false when
// the file does not start with the qcow2 magic.
func readQcowHeader(path string) (h qcowHeader, isQcow bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return h, false, err
	}
	defer f.Close()
	var hdr [qcowV2HeaderLen + 32]byte
	n, err := io.ReadFull(f, hdr[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		if errors.Is(err, io.EOF) {
			return h, false, nil
		}
		return h, false, err
	}
	if n < 4 || binary.BigEndian.Uint32(hdr[0:4]) != qcowMagic {
		return h, false, nil
	}
	if n < qcowV2HeaderLen {
		return h, true, errors.New("short qcow2 header")
	}
	be := binary.BigEndian
	version := be.Uint32(hdr[4:8])
	backingOff, backingLen := be.Uint64(hdr[8:16]), be.Uint32(hdr[16:20])
	headerLen := uint32(qcowV2HeaderLen)
	switch version {
	case 2:
	case 3:
		if n < qcowV2HeaderLen+32 {
			return h, true, errors.New("short qcow2 v3 header")
		}
		if be.Uint64(hdr[72:80])&incompatDataFile != 0 {
			return h, true, errors.New("external data files are not allowed")
		}
		headerLen = be.Uint32(hdr[100:104])
	default:
		return h, true, fmt.Errorf("qcow2 version %d", version)
	}
	if backingOff == 0 {
		return h, true, nil
	}
	if backingOff < uint64(headerLen) {
		return h, true, errors.New("backing file name inside the header")
	}
	if backingLen == 0 || backingLen > qcowMaxBackingLen {
		return h, true, fmt.Errorf("backing file name of %d bytes", backingLen)
	}
	name := make([]byte, backingLen)
	if _, err := f.ReadAt(name, int64(backingOff)); err != nil {
		return h, true, fmt.Errorf("read backing file name: %w", err)
	}
	if strings.IndexByte(string(name), 0) >= 0 {
		return h, true, errors.New("backing file name contains NUL")
	}
	h.backing = string(name)
	h.backingFormat, err = backingFormatExt(f, int64(headerLen), int64(backingOff))
	return h, true, err
}

// backingFormatExt walks the header extensions, which start at headerLen
// and end before the backing file name, for the backing format.
func backingFormatExt(f *os.File, off, end int64) (string, error) {
	for off+8 <= end {
		var tl [8]byte
		if _, err := f.ReadAt(tl[:], off); err != nil {
			return "", fmt.Errorf("read header extension: %w", err)
		}
		typ, size := binary.BigEndian.Uint32(tl[0:4]), int64(binary.BigEndian.Uint32(tl[4:8]))
		if typ == extEnd {
			return "", nil
		}
		if off+8+size > end {
			return "", errors.New("header extension overruns the backing file name")
		}
		if typ == extBackingFormat {
			b := make([]byte, size)
			if _, err := f.ReadAt(b, off+8); err != nil {
				return "", fmt.Errorf("read backing format: %w", err)
			}
			return string(b), nil
		}
		off += 8 + (size+7)&^7 // extension data is padded to 8 bytes
	}
	return "", nil
}

// checkDisks checks every disk of cfg and returns the backing files (not the
// top images, which Cloud Hypervisor grants itself) for the Landlock rules.
func checkDisks(disks []vmm.Disk, roots []string) (backing []string, err error) {
	for i, d := range disks {
		chain, err := imageChain(d.Path, d.Raw, roots)
		if err != nil {
			return nil, fmt.Errorf("disk %d: %w", i, err)
		}
		backing = append(backing, chain[1:]...)
	}
	return backing, nil
}
