package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ManifestFile is the manifest's name in a snapshot directory.
const ManifestFile = "manifest.json"

// ErrCorrupt is returned when a snapshot's files do not match its manifest.
var ErrCorrupt = errors.New("snapshot: corrupt")

// Manifest lists a snapshot's files with their sizes and checksums.
type Manifest struct {
	Files []FileSum `json:"files"`
}

// FileSum is one file of a manifest.
type FileSum struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// sumBlock is the unit of Sum.
const sumBlock = 64 << 10

// Sum computes the checksum of a file's content: SHA-256 over its non-zero
// 64 KiB blocks, each prefixed by its offset, and the size. Holes and zero
// blocks count as zeros without being hashed, so a sparse memory file costs
// only its data to check, and the sum does not depend on how the filesystem
// happens to lay the file out (ext4 may report a zeroed range as data or as a
// hole, depending on its page cache).
func Sum(path string) (FileSum, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return FileSum{}, err
	}
	h := sha256.New()
	size := fi.Size()
	fmt.Fprintf(h, "size %d\n", size)
	buf := make([]byte, sumBlock)
	next := int64(0) // the first block not yet hashed
	for next*sumBlock < size {
		data, err := unix.Seek(int(f.Fd()), next*sumBlock, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return FileSum{}, fmt.Errorf("snapshot: %s: %w", path, err)
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return FileSum{}, fmt.Errorf("snapshot: %s: %w", path, err)
		}
		for b := max(next, data/sumBlock); b*sumBlock < hole; b++ {
			n, err := f.ReadAt(buf, b*sumBlock)
			if err != nil && !errors.Is(err, io.EOF) {
				return FileSum{}, fmt.Errorf("snapshot: %s: %w", path, err)
			}
			if !allZero(buf[:n]) {
				fmt.Fprintf(h, "%d\n", b)
				h.Write(buf[:n])
			}
			next = b + 1
		}
	}
	return FileSum{Name: filepath.Base(path), Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// WriteManifest sums the named files of dir and writes the manifest.
func WriteManifest(dir string, names []string) (Manifest, error) {
	m, err := Sums(dir, names)
	if err != nil {
		return m, err
	}
	return m, m.Write(dir)
}

// Sums sums the named files of dir.
func Sums(dir string, names []string) (Manifest, error) {
	var m Manifest
	for _, n := range names {
		s, err := Sum(filepath.Join(dir, n))
		if err != nil {
			return m, err
		}
		m.Files = append(m.Files, s)
	}
	return m, nil
}

// Write writes m as dir's manifest, atomically.
func (m Manifest) Write(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o444); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, ManifestFile))
}

// Checker verifies snapshots against their manifests. It remembers each
// file it verified by inode, size, mtime and ctime, and checks a file again
// only when one of them changed, so restoring the same snapshot many times
// hashes it once.
type Checker struct {
	mu        sync.Mutex
	seen      map[string]statKey
	fresh     map[string]bool
	freshDirs map[string][]string
}

type statKey struct {
	ino, size          uint64
	mtime, ctime       int64
	mtimeNs, ctimeNsec int64
}

// NewChecker returns an empty Checker.
func NewChecker() *Checker {
	return &Checker{seen: map[string]statKey{}, fresh: map[string]bool{}, freshDirs: map[string][]string{}}
}

func keyOf(path string) (statKey, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return statKey{}, err
	}
	return statKey{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Sec, mtimeNs: st.Mtim.Nsec,
		ctime: st.Ctim.Sec, ctimeNsec: st.Ctim.Nsec}, nil
}

// Fresh records dir's files as verified before their manifest exists: they
// were just written by this process, which is summing them in the
// background (WriteManifest). Until the manifest is there, Verify accepts
// the files only while they are unchanged since Fresh.
func (c *Checker) Fresh(dir string, names []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		p := filepath.Join(dir, n)
		k, err := keyOf(p)
		if err != nil {
			return err
		}
		c.seen[p] = k
		c.fresh[p] = true
	}
	c.freshDirs[dir] = names
	return nil
}

// Trust records dir's files as verified (they were just written and summed).
func (c *Checker) Trust(dir string, m Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.freshDirs, dir)
	for _, f := range m.Files {
		p := filepath.Join(dir, f.Name)
		if k, err := keyOf(p); err == nil {
			c.seen[p] = k
		}
	}
}

// Verify checks every file of dir's manifest. It returns an error wrapping
// ErrCorrupt that names the first file that does not match.
func (c *Checker) Verify(dir string) error {
	// Fresh state first, then the manifest: the background writer writes
	// the manifest before Trust drops the fresh state, so a dir that is
	// not fresh here has its manifest on disk by the read below. (The
	// other order lost the race: a read before the write, then a check
	// after Trust, refused a sound snapshot with "no manifest".)
	c.mu.Lock()
	names, fresh := c.freshDirs[dir]
	c.mu.Unlock()
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) && fresh {
		return c.verifyFresh(dir, names)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: no manifest: %v", ErrCorrupt, dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%w: %s: bad manifest: %v", ErrCorrupt, dir, err)
	}
	for _, f := range m.Files {
		// A manifest names files of its own directory, never a path that
		// leaves it (the manifest is a file on disk, not proof).
		if f.Name == "" || f.Name != filepath.Base(f.Name) || !filepath.IsLocal(f.Name) {
			return fmt.Errorf("%w: %s: manifest names %q, not a file of the snapshot", ErrCorrupt, dir, f.Name)
		}
		if err := c.verifyFile(filepath.Join(dir, f.Name), f); err != nil {
			return err
		}
	}
	return nil
}

// verifyFresh accepts a fresh snapshot's files while their content is
// unchanged: same inode, size and mtime (a link count or mode change, which
// only moves ctime, does not count).
func (c *Checker) verifyFresh(dir string, names []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		p := filepath.Join(dir, n)
		k, err := keyOf(p)
		if err != nil || !k.sameContent(c.seen[p]) {
			return fmt.Errorf("%w: %s changed before its checksum was written", ErrCorrupt, p)
		}
	}
	return nil
}

// Unchanged reports whether a fresh dir's files still have the content
// they had at Fresh. The manifest is written only if they do.
func (c *Checker) Unchanged(dir string) bool {
	c.mu.Lock()
	names := c.freshDirs[dir]
	c.mu.Unlock()
	return c.verifyFresh(dir, names) == nil
}

func (k statKey) sameContent(o statKey) bool {
	return k.ino == o.ino && k.size == o.size && k.mtime == o.mtime && k.mtimeNs == o.mtimeNs
}

func (c *Checker) verifyFile(p string, want FileSum) error {
	k, err := keyOf(p)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	c.mu.Lock()
	ok := c.seen[p] == k
	c.mu.Unlock()
	if ok {
		return nil
	}
	got, err := Sum(p)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if got.Size != want.Size || got.SHA256 != want.SHA256 {
		return fmt.Errorf("%w: %s does not match its checksum (size %d, want %d)", ErrCorrupt, p, got.Size, want.Size)
	}
	c.mu.Lock()
	c.seen[p] = k
	c.mu.Unlock()
	return nil
}
