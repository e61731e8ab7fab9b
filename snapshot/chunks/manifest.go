package chunks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ManifestVersion is the only manifest version this package writes and reads.
const ManifestVersion = 1

// Bounds of a manifest (ParseManifest refuses what exceeds them).
const (
	MaxManifestBytes = 16 << 20
	MaxFiles         = 256
	MaxChunkLen      = 64 << 20 // one chunk's raw length
	MaxChunks        = 1 << 20  // over all files
	MaxMetaBytes     = 1 << 20
	MaxRequires      = 16
	MaxFileSize      = 1 << 42 // 4 TiB
)

// Manifest lists a snapshot's files and their chunks. A manifest stored
// as "manifests/<id>.json" is complete: Export writes it last.
type Manifest struct {
	Version  int               `json:"version"`
	ID       string            `json:"id"`                 // caller-chosen, [a-z0-9-]{1,80}
	Kind     string            `json:"kind"`               // "paused", "snapshot", "template", "checkpoint"
	Parent   string            `json:"parent,omitempty"`   // manifest this one builds on (lineage)
	Requires map[string]string `json:"requires,omitempty"` // "kernel"/"initramfs"/"base" -> digest
	Files    []File            `json:"files"`
	Meta     json.RawMessage   `json:"meta,omitempty"` // opaque to chunks (hostd's records), bounded
	Created  time.Time         `json:"created"`
}

// File is one file of a manifest. Its chunks are sorted by offset, do not
// overlap and lie within Size; a range no chunk covers is zeros.
type File struct {
	Name   string  `json:"name"`
	Size   int64   `json:"size"`
	Mode   uint32  `json:"mode"`
	Chunks []Chunk `json:"chunks"`
}

// Chunk is a range of a file: its raw bytes' sha256 (hex; "" = all zeros,
// stored nowhere) and its size compressed in the store (0 = unknown).
type Chunk struct {
	Off    int64  `json:"off"`
	Len    int64  `json:"len"`
	Digest string `json:"digest,omitempty"`
	Stored int64  `json:"stored,omitempty"`
}

// Kinds a manifest may have.
var Kinds = []string{"paused", "snapshot", "template", "checkpoint"}

var (
	idRE     = regexp.MustCompile(`^[a-z0-9-]{1,80}$`)
	digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	reqKeyRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	reqValRE = regexp.MustCompile(`^[A-Za-z0-9:._-]{1,128}$`)
)

// ValidID reports whether id is a manifest id ([a-z0-9-]{1,80}).
func ValidID(id string) bool { return idRE.MatchString(id) }

// ParseManifest decodes and checks a manifest: size-bounded, strict (no
// unknown fields, one JSON value), version 1, safe names, consistent
// chunks. Everything it returns passes Validate.
func ParseManifest(b []byte) (Manifest, error) {
	if len(b) > MaxManifestBytes {
		return Manifest{}, fmt.Errorf("chunks: manifest: %d bytes, over %d", len(b), MaxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("chunks: manifest: %w", err)
	}
	if dec.More() {
		return Manifest{}, fmt.Errorf("chunks: manifest: data after the manifest")
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Validate checks m as ParseManifest does.
func (m *Manifest) Validate() error {
	if m.Version != ManifestVersion {
		return fmt.Errorf("chunks: manifest: version %d, this host reads %d", m.Version, ManifestVersion)
	}
	if !ValidID(m.ID) {
		return fmt.Errorf("chunks: manifest: bad id %q", trunc(m.ID))
	}
	if !validKind(m.Kind) {
		return fmt.Errorf("chunks: manifest %s: bad kind %q (%s)", m.ID, trunc(m.Kind), strings.Join(Kinds, ", "))
	}
	if m.Parent != "" && (!ValidID(m.Parent) || m.Parent == m.ID) {
		return fmt.Errorf("chunks: manifest %s: bad parent %q", m.ID, trunc(m.Parent))
	}
	if len(m.Requires) > MaxRequires {
		return fmt.Errorf("chunks: manifest %s: %d requires, over %d", m.ID, len(m.Requires), MaxRequires)
	}
	for k, v := range m.Requires {
		if !reqKeyRE.MatchString(k) || !reqValRE.MatchString(v) {
			return fmt.Errorf("chunks: manifest %s: bad requirement %q=%q", m.ID, trunc(k), trunc(v))
		}
	}
	if len(m.Meta) > MaxMetaBytes {
		return fmt.Errorf("chunks: manifest %s: meta of %d bytes, over %d", m.ID, len(m.Meta), MaxMetaBytes)
	}
	if len(m.Files) > MaxFiles {
		return fmt.Errorf("chunks: manifest %s: %d files, over %d", m.ID, len(m.Files), MaxFiles)
	}
	names := make(map[string]bool, len(m.Files))
	total := 0
	for i := range m.Files {
		f := &m.Files[i]
		if err := ValidName(f.Name); err != nil {
			return fmt.Errorf("chunks: manifest %s: file %d: %w", m.ID, i, err)
		}
		if names[f.Name] {
			return fmt.Errorf("chunks: manifest %s: file %q twice", m.ID, f.Name)
		}
		names[f.Name] = true
		total += len(f.Chunks)
		if total > MaxChunks {
			return fmt.Errorf("chunks: manifest %s: over %d chunks", m.ID, MaxChunks)
		}
		if err := f.validate(); err != nil {
			return fmt.Errorf("chunks: manifest %s: file %s: %w", m.ID, f.Name, err)
		}
	}
	return nil
}

func (f *File) validate() error {
	if f.Size < 0 || f.Size > MaxFileSize {
		return fmt.Errorf("size %d out of [0, %d]", f.Size, int64(MaxFileSize))
	}
	if f.Mode&^0o777 != 0 {
		return fmt.Errorf("mode %o: only permission bits", f.Mode)
	}
	var end int64
	for j, c := range f.Chunks {
		switch {
		case c.Len <= 0 || c.Len > MaxChunkLen:
			return fmt.Errorf("chunk %d: length %d out of (0, %d]", j, c.Len, MaxChunkLen)
		case c.Off < end:
			return fmt.Errorf("chunk %d: offset %d before the previous chunk's end %d", j, c.Off, end)
		case c.Off > f.Size-c.Len:
			return fmt.Errorf("chunk %d: [%d, +%d) past the size %d", j, c.Off, c.Len, f.Size)
		case c.Digest == "" && c.Stored != 0:
			return fmt.Errorf("chunk %d: a zero chunk has no stored size", j)
		case c.Digest != "" && !digestRE.MatchString(c.Digest):
			return fmt.Errorf("chunk %d: digest %q is not 64 hex digits", j, trunc(c.Digest))
		case c.Stored < 0 || c.Stored > MaxChunkLen+MaxChunkLen/8:
			return fmt.Errorf("chunk %d: stored size %d", j, c.Stored)
		}
		end = c.Off + c.Len
	}
	return nil
}

// ValidName checks a file name of a manifest: one path element, not ".",
// "..", hidden (temp names are) or over 255 bytes, printable.
func ValidName(n string) error {
	switch {
	case n == "" || len(n) > 255:
		return fmt.Errorf("name %q: 1 to 255 bytes", trunc(n))
	case strings.ContainsAny(n, "/\\\x00") || strings.Contains(n, ".."):
		return fmt.Errorf("name %q: no /, \\, NUL or ..", trunc(n))
	case n[0] == '.':
		return fmt.Errorf("name %q: must not start with a dot", trunc(n))
	}
	for _, r := range n {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return fmt.Errorf("name %q: control or invalid characters", trunc(n))
		}
	}
	return nil
}

func validKind(k string) bool {
	for _, x := range Kinds {
		if k == x {
			return true
		}
	}
	return false
}

// Digests returns the distinct non-zero chunk digests of m, in first-seen order.
func (m *Manifest) Digests() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			if c.Digest != "" && !seen[c.Digest] {
				seen[c.Digest] = true
				out = append(out, c.Digest)
			}
		}
	}
	return out
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
