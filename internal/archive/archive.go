// Package archive moves directory trees as tar streams, safely in both
// directions: Extract unpacks a tar (optionally gzip) stream through a Sink,
// refusing any entry that could land outside the target directory, and
// Write streams a tree that a Source lists as tar. Both stream: memory use
// does not grow with the tree or the archive.
//
// Only regular files and directories are carried. Extract refuses links
// (symlink and hard link entries) and special files outright, so no later
// entry can pass through a link that the archive made; the entry names are
// checked lexically with filepath.IsLocal (stdlib). Write skips links and
// special files.
package archive

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error about a malformed or hostile entry;
// the message names the entry.
var ErrInvalid = errors.New("archive: invalid archive")

// Limits of one archive.
const (
	// MaxEntries caps the entries of one archive (either direction).
	MaxEntries = 1 << 20
	// MaxDepth caps how deep Write descends.
	MaxDepth = 256
	// maxName caps an entry's name.
	maxName = 4096
)

// Result counts what Extract unpacked.
type Result struct {
	Entries int64 // files and directories
	Bytes   int64 // bytes of file content
}

// Sink receives the entries of an archive. Names are clean, relative,
// slash-separated and local (no "..", not absolute); "." is the target.
type Sink interface {
	// Mkdir creates directory name and its parents.
	Mkdir(ctx context.Context, name string) error
	// WriteFile creates or replaces file name (and its missing parents)
	// with r's bytes and permission bits mode.
	WriteFile(ctx context.Context, name string, mode fs.FileMode, r io.Reader) error
}

// Decompress returns r, gunzipped if it starts with gzip's magic bytes.
func Decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrInvalid, err)
		}
		return zr, nil
	}
	return br, nil
}

// CheckName returns an entry's name cleaned, or an ErrInvalid error naming
// it when it is absolute, has a ".." element or a NUL byte, or is empty.
func CheckName(name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("%w: an entry has an empty name", ErrInvalid)
	case len(name) > maxName:
		return "", fmt.Errorf("%w: entry %.64q...: name too long", ErrInvalid, name)
	case strings.ContainsRune(name, 0):
		return "", fmt.Errorf("%w: entry %q: name has a NUL byte", ErrInvalid, name)
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("%w: entry %q: absolute path", ErrInvalid, name)
	}
	for el := range strings.SplitSeq(name, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: entry %q: has a \"..\" element", ErrInvalid, name)
		}
	}
	clean := path.Clean(name)
	if clean != "." && !filepath.IsLocal(clean) {
		return "", fmt.Errorf("%w: entry %q: not a local path", ErrInvalid, name)
	}
	return clean, nil
}

// Extract reads a tar (or gzip-compressed tar) stream from r and hands its
// entries to sink. It stops at the first invalid entry with an ErrInvalid
// error naming it; entries before it have been written.
func Extract(ctx context.Context, r io.Reader, sink Sink) (Result, error) {
	var res Result
	r, err := Decompress(r)
	if err != nil {
		return res, err
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("%w: after %d entries: %v", ErrInvalid, res.Entries, err)
		}
		if res.Entries >= MaxEntries {
			return res, fmt.Errorf("%w: more than %d entries", ErrInvalid, MaxEntries)
		}
		n, err := extractOne(ctx, tr, hdr, sink)
		if err != nil {
			return res, err
		}
		if n >= 0 {
			res.Entries++
			res.Bytes += n
		}
	}
}

// extractOne unpacks one entry and returns its content's size (-1: the
// entry was metadata, not counted).
func extractOne(ctx context.Context, tr *tar.Reader, hdr *tar.Header, sink Sink) (int64, error) {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return -1, nil
	}
	name, err := CheckName(hdr.Name)
	if err != nil {
		return 0, err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := sink.Mkdir(ctx, name); err != nil {
			return 0, fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		return 0, nil
	case tar.TypeReg, tar.TypeRegA:
		if name == "." {
			return 0, fmt.Errorf("%w: entry %q: a file cannot be the target directory", ErrInvalid, hdr.Name)
		}
		cr := &countReader{r: tr}
		if err := sink.WriteFile(ctx, name, fs.FileMode(hdr.Mode)&fs.ModePerm, cr); err != nil {
			return 0, fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		return cr.n, nil
	case tar.TypeSymlink:
		return 0, fmt.Errorf("%w: entry %q: symlinks are not supported (-> %q)", ErrInvalid, hdr.Name, hdr.Linkname)
	case tar.TypeLink:
		return 0, fmt.Errorf("%w: entry %q: hard links are not supported (-> %q)", ErrInvalid, hdr.Name, hdr.Linkname)
	}
	return 0, fmt.Errorf("%w: entry %q: unsupported type %q", ErrInvalid, hdr.Name, hdr.Typeflag)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Entry describes one directory entry that a Source lists.
type Entry struct {
	Name    string // base name
	Size    int64
	Mode    fs.FileMode // type and permission bits
	ModTime time.Time
}

// Source is a tree to archive. Names are relative and slash-separated;
// "." is the root.
type Source interface {
	List(ctx context.Context, name string) ([]Entry, error)
	Open(ctx context.Context, name string) (io.ReadCloser, error)
}

// Write streams the tree of src as tar to w: directories (with a trailing
// "/") and regular files, names relative to the root. Links and special
// files are skipped. The entries a Source lists are not trusted: bad names
// are refused (ErrInvalid), and a file is cut or fails at its listed size.
func Write(ctx context.Context, w io.Writer, src Source) error {
	tw := tar.NewWriter(w)
	wr := &treeWriter{tw: tw, src: src}
	if err := wr.dir(ctx, ".", 0); err != nil {
		return err
	}
	return tw.Close()
}

type treeWriter struct {
	tw      *tar.Writer
	src     Source
	entries int
}

func (wr *treeWriter) dir(ctx context.Context, name string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: %q: deeper than %d", ErrInvalid, name, MaxDepth)
	}
	ents, err := wr.src.List(ctx, name)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
			return fmt.Errorf("%w: %q lists a bad name %q", ErrInvalid, name, e.Name)
		}
		if wr.entries++; wr.entries > MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrInvalid, MaxEntries)
		}
		child := path.Join(name, e.Name)
		switch {
		case e.Mode.IsDir():
			if err := wr.header(child+"/", tar.TypeDir, e, 0); err != nil {
				return err
			}
			if err := wr.dir(ctx, child, depth+1); err != nil {
				return err
			}
		case e.Mode.IsRegular():
			if err := wr.file(ctx, child, e); err != nil {
				return err
			}
		}
	}
	return nil
}

func (wr *treeWriter) header(name string, typ byte, e Entry, size int64) error {
	return wr.tw.WriteHeader(&tar.Header{
		Typeflag: typ,
		Name:     name,
		Size:     size,
		Mode:     int64(e.Mode.Perm()),
		ModTime:  e.ModTime,
		Format:   tar.FormatPAX,
	})
}

func (wr *treeWriter) file(ctx context.Context, name string, e Entry) error {
	if e.Size < 0 {
		return fmt.Errorf("%w: %q has size %d", ErrInvalid, name, e.Size)
	}
	rc, err := wr.src.Open(ctx, name)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := wr.header(name, tar.TypeReg, e, e.Size); err != nil {
		return err
	}
	if _, err := io.CopyN(wr.tw, rc, e.Size); err != nil {
		return fmt.Errorf("archive %q: %w", name, err)
	}
	return nil
}
