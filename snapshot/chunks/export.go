package chunks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"
	"syscall"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Export chunks the named files (name -> path on disk), skips zero chunks
// (holes are not even read), uploads the chunks the bucket lacks (zstd,
// key "chunks/<sha256>") in parallel, then the manifest
// ("manifests/<id>.json") last: a manifest that exists is complete. m
// gives the ID, Kind, Parent, Requires and Meta; Export fills Version,
// Files and (when zero) Created, and returns the manifest it stored.
//
// With Refs, each chunk's reference is acquired before the bucket is asked
// whether it holds it, so a collector racing the export either sees the
// reference or has deleted the chunk before (and the export uploads it).
// Memory is bounded by Parallel x ChunkSize x 2.
//
// Use a new ID for each export: references add up per manifest, so a
// re-export under an old ID keeps the old content's chunks referenced
// too (safe, not tidy). A failed Export leaves its references with m.ID
// (no manifest is written): Delete(m.ID) releases them.
func (s *Store) Export(ctx context.Context, m Manifest, files map[string]string) (Manifest, Stats, error) {
	m.Version = ManifestVersion
	if m.Created.IsZero() {
		m.Created = now().UTC()
	}
	names := make([]string, 0, len(files))
	for n := range files {
		if err := ValidName(n); err != nil {
			return Manifest{}, Stats{}, fmt.Errorf("chunks: export %s: %w", m.ID, err)
		}
		names = append(names, n)
	}
	sort.Strings(names)
	m.Files = make([]File, len(names))
	for i, n := range names {
		m.Files[i].Name = n
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, Stats{}, err
	}
	x := &exporter{s: s, m: &m, inflight: map[string]*upload{}}
	if err := x.run(ctx, names, files); err != nil {
		return Manifest{}, x.stats(), err
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, x.stats(), fmt.Errorf("chunks: export %s: %w", m.ID, err)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, x.stats(), fmt.Errorf("chunks: export %s: %w", m.ID, err)
	}
	if err := s.cfg.Bucket.Put(ctx, ManifestKey(m.ID), body); err != nil {
		return Manifest{}, x.stats(), fmt.Errorf("chunks: export %s: manifest: %w", m.ID, err)
	}
	st := x.stats()
	s.log.Info("snapshot exported", "manifest", m.ID, "kind", m.Kind, "files", st.Files,
		"bytes", st.Bytes, "chunks", st.Chunks, "zero_chunks", st.ZeroChunks,
		"uploaded", st.Uploaded, "transfer_bytes", st.TransferBytes)
	return m, st, nil
}

// exporter is one Export's state.
type exporter struct {
	s *Store
	m *Manifest

	mu       sync.Mutex
	st       Stats
	inflight map[string]*upload // digest -> its (first) upload in this export
	stored   map[string]int64   // distinct digests -> stored size
}

// upload is one digest's check-and-upload, shared by its chunks.
type upload struct {
	done   chan struct{}
	stored int64
	err    error
}

// job is a chunk read from disk, waiting for a worker.
type job struct {
	file, chunk int
	buf         []byte // len = the chunk's length; from the pool
}

func (x *exporter) stats() Stats {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := x.st
	for _, n := range x.stored {
		st.StoredBytes += n
	}
	return st
}

// run reads the files in one goroutine and hands the chunks that hold
// data to Parallel workers; buffers come from a pool of Parallel, so the
// reader waits for the workers.
func (x *exporter) run(ctx context.Context, names []string, files map[string]string) error {
	par := x.s.cfg.Parallel
	pool := make(chan []byte, par)
	for range par {
		pool <- make([]byte, x.s.cfg.ChunkSize)
	}
	jobs := make(chan job)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(jobs)
		for i, n := range names {
			if err := x.readFile(gctx, i, files[n], pool, jobs); err != nil {
				return fmt.Errorf("chunks: export %s: %s: %w", x.m.ID, n, err)
			}
		}
		return nil
	})
	for range par {
		g.Go(func() error {
			dst := make([]byte, 0, x.s.cfg.ChunkSize+x.s.cfg.ChunkSize/16)
			for j := range jobs {
				var err error
				dst, err = x.chunk(gctx, j, dst)
				pool <- j.buf[:cap(j.buf)]
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// readFile lays out file i's chunks and sends those that may hold data;
// the chunks wholly in a hole (SEEK_DATA) are zero chunks, not read.
func (x *exporter) readFile(ctx context.Context, i int, path string, pool chan []byte, jobs chan<- job) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file")
	}
	size, cs := fi.Size(), int64(x.s.cfg.ChunkSize)
	file := &x.m.Files[i]
	file.Size, file.Mode = size, uint32(fi.Mode().Perm())
	n := (size + cs - 1) / cs
	if n > MaxChunks {
		return fmt.Errorf("%d bytes: over %d chunks", size, MaxChunks)
	}
	file.Chunks = make([]Chunk, n)
	x.mu.Lock()
	x.st.Files++
	x.st.Bytes += size
	x.st.Chunks += int(n)
	x.mu.Unlock()
	var data int64 // the next offset that may hold data
	for c := int64(0); c < n; c++ {
		off := c * cs
		ln := min(cs, size-off)
		file.Chunks[c] = Chunk{Off: off, Len: ln}
		if data < off {
			if data, err = nextData(f, off, size); err != nil {
				return err
			}
		}
		if data >= off+ln {
			x.zero()
			continue
		}
		var buf []byte
		select {
		case buf = <-pool:
		case <-ctx.Done():
			return ctx.Err()
		}
		buf = buf[:ln]
		if k, err := f.ReadAt(buf, off); err != nil {
			pool <- buf
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("shrank to %d bytes during the export", off+int64(k))
			}
			return err
		}
		select {
		case jobs <- job{file: i, chunk: int(c), buf: buf}:
		case <-ctx.Done():
			pool <- buf
			return ctx.Err()
		}
	}
	return nil
}

// nextData is the first offset at or after off that holds data (size when
// none does). A file system without SEEK_DATA says off: everything is data.
func nextData(f *os.File, off, size int64) (int64, error) {
	d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, syscall.ENXIO):
		return size, nil
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EOPNOTSUPP):
		return off, nil
	case err != nil:
		return 0, fmt.Errorf("seek data: %w", err)
	}
	return d, nil
}

func (x *exporter) zero() {
	x.mu.Lock()
	x.st.ZeroChunks++
	x.mu.Unlock()
}

var zeroBlock [64 << 10]byte

// isZero reports whether b is all zeros.
func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// chunk hashes one chunk, and uploads it unless it is zeros or the bucket
// (or another chunk of this export) has it. dst is the worker's
// compression buffer, returned for reuse.
func (x *exporter) chunk(ctx context.Context, j job, dst []byte) ([]byte, error) {
	c := &x.m.Files[j.file].Chunks[j.chunk]
	if isZero(j.buf) {
		x.zero()
		return dst, nil
	}
	sum := sha256.Sum256(j.buf)
	d := hex.EncodeToString(sum[:])
	c.Digest = d
	x.mu.Lock()
	u, ok := x.inflight[d]
	if !ok {
		u = &upload{done: make(chan struct{})}
		x.inflight[d] = u
	}
	x.mu.Unlock()
	if ok { // another chunk of this export carries it
		select {
		case <-u.done:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
		c.Stored = u.stored
		return dst, u.err
	}
	dst, u.stored, u.err = x.upload(ctx, d, j.buf, dst)
	close(u.done)
	if u.err != nil {
		return dst, fmt.Errorf("chunks: export %s: %s chunk %d: %w", x.m.ID, x.m.Files[j.file].Name, j.chunk, u.err)
	}
	c.Stored = u.stored
	x.mu.Lock()
	if x.stored == nil {
		x.stored = map[string]int64{}
	}
	x.stored[d] = u.stored
	x.mu.Unlock()
	return dst, nil
}

// upload acquires d's reference, then puts it unless the bucket has it;
// it returns d's stored size (0 when unknown).
func (x *exporter) upload(ctx context.Context, d string, raw, dst []byte) ([]byte, int64, error) {
	s := x.s
	if s.cfg.Refs != nil {
		if err := s.cfg.Refs.Acquire(ctx, x.m.ID, []string{d}); err != nil {
			return dst, 0, fmt.Errorf("acquire: %w", err)
		}
	}
	if n, ok := s.knownSize(d); ok {
		return dst, n, nil
	}
	n, have, err := s.stat(ctx, d)
	if err != nil {
		return dst, 0, err
	}
	if have {
		s.setKnown(d, n)
		return dst, n, nil
	}
	dst = s.enc.EncodeAll(raw, dst[:0])
	if err := s.cfg.Bucket.Put(ctx, ChunkKey(d), dst); err != nil {
		return dst, 0, err
	}
	n = int64(len(dst))
	s.setKnown(d, n)
	x.mu.Lock()
	x.st.Uploaded++
	x.st.TransferBytes += n
	x.mu.Unlock()
	return dst, n, nil
}

// stat says whether the bucket holds chunk d, and its stored size when the
// bucket can tell it in the same request.
func (s *Store) stat(ctx context.Context, d string) (int64, bool, error) {
	if sz, ok := s.cfg.Bucket.(sizer); ok {
		n, err := sz.Size(ctx, ChunkKey(d))
		if errors.Is(err, fs.ErrNotExist) {
			return 0, false, nil
		}
		return n, err == nil, err
	}
	have, err := s.cfg.Bucket.Has(ctx, ChunkKey(d))
	return 0, have, err
}
