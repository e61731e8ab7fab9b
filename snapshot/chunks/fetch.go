package chunks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Fetch writes m's files into dir (sparse: zero chunks are holes), chunks
// in parallel through the cache, each verified by its digest (ErrCorrupt
// names the file and the chunk; a chunk the bucket lacks is ErrCorrupt and
// fs.ErrNotExist). Files are written under temporary names and renamed
// only when all of them are complete: never half-right. A chunk that
// several places share is fetched once.
func (s *Store) Fetch(ctx context.Context, m Manifest, dir string) (Stats, error) {
	if err := m.Validate(); err != nil {
		return Stats{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Stats{}, fmt.Errorf("chunks: fetch %s: %w", m.ID, err)
	}
	f := &fetcher{s: s, m: &m, byDigest: map[string][]place{}}
	defer f.cleanup()
	if err := f.create(dir); err != nil {
		return f.st, err
	}
	if err := f.run(ctx); err != nil {
		return f.st, err
	}
	if err := f.commit(dir); err != nil {
		return f.st, err
	}
	s.log.Info("snapshot fetched", "manifest", m.ID, "files", f.st.Files, "bytes", f.st.Bytes,
		"chunks", f.st.Chunks, "fetched", f.st.Fetched, "cache_hits", f.st.CacheHits,
		"transfer_bytes", f.st.TransferBytes)
	return f.st, nil
}

// fetcher is one Fetch's state.
type fetcher struct {
	s  *Store
	m  *Manifest
	fs []*os.File // temp files, by m.Files index

	mu       sync.Mutex
	st       Stats
	byDigest map[string][]place
	order    []string // digests in first-seen order
}

// place is where a chunk goes.
type place struct{ file, chunk int }

// create makes the temporary files at their sizes (holes) and indexes
// the chunks by digest.
func (f *fetcher) create(dir string) error {
	f.fs = make([]*os.File, len(f.m.Files))
	for i, file := range f.m.Files {
		t, err := os.CreateTemp(dir, ".fetch-*")
		if err != nil {
			return fmt.Errorf("chunks: fetch %s: %w", f.m.ID, err)
		}
		f.fs[i] = t
		if err := t.Truncate(file.Size); err != nil {
			return fmt.Errorf("chunks: fetch %s: %s: %w", f.m.ID, file.Name, err)
		}
		f.st.Files++
		f.st.Bytes += file.Size
		for j, c := range file.Chunks {
			f.st.Chunks++
			if c.Digest == "" {
				f.st.ZeroChunks++
				continue
			}
			if _, ok := f.byDigest[c.Digest]; !ok {
				f.order = append(f.order, c.Digest)
			}
			f.byDigest[c.Digest] = append(f.byDigest[c.Digest], place{i, j})
		}
	}
	return nil
}

// run fetches every distinct chunk once, with Parallel workers.
func (f *fetcher) run(ctx context.Context) error {
	digests := make(chan string)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(digests)
		for _, d := range f.order {
			select {
			case digests <- d:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range f.s.cfg.Parallel {
		g.Go(func() error {
			raw := make([]byte, 0, f.s.cfg.ChunkSize)
			for d := range digests {
				var err error
				if raw, err = f.chunk(gctx, d, raw); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// chunk gets digest d (cache, else bucket), verifies it and writes it at
// each of its places.
func (f *fetcher) chunk(ctx context.Context, d string, raw []byte) ([]byte, error) {
	ps := f.byDigest[d]
	first := f.m.Files[ps[0].file].Chunks[ps[0].chunk]
	name := f.m.Files[ps[0].file].Name
	raw, stored, hit, err := f.s.get(ctx, d, first.Len, raw)
	if err != nil {
		return raw, fmt.Errorf("chunks: fetch %s: %s chunk %d (offset %d): %w", f.m.ID, name, ps[0].chunk, first.Off, err)
	}
	for _, p := range ps {
		c := f.m.Files[p.file].Chunks[p.chunk]
		if c.Len != int64(len(raw)) { // the same digest, two lengths: a forged manifest
			return raw, fmt.Errorf("%w: fetch %s: %s chunk %d: length %d, the chunk has %d", ErrCorrupt,
				f.m.ID, f.m.Files[p.file].Name, p.chunk, c.Len, len(raw))
		}
		if _, err := f.fs[p.file].WriteAt(raw, c.Off); err != nil {
			return raw, fmt.Errorf("chunks: fetch %s: %s: %w", f.m.ID, f.m.Files[p.file].Name, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.StoredBytes += stored
	if hit {
		f.st.CacheHits++
	} else {
		f.st.Fetched++
		f.st.TransferBytes += stored
	}
	return raw, nil
}

// get returns chunk d's raw bytes (in raw's storage), verified against d,
// its stored size and whether the cache served it. A cached copy that
// does not verify is dropped and fetched again.
func (s *Store) get(ctx context.Context, d string, n int64, raw []byte) ([]byte, int64, bool, error) {
	if s.cache != nil {
		if b, ok := s.cache.get(d); ok {
			out, err := s.decode(d, b, n, raw)
			if err == nil {
				return out, int64(len(b)), true, nil
			}
			s.log.Warn("chunk cache: corrupt entry dropped", "digest", d, "err", err)
			s.cache.drop(d)
			raw = out
		}
	}
	b, err := s.cfg.Bucket.Get(ctx, ChunkKey(d))
	if errors.Is(err, fs.ErrNotExist) {
		return raw, 0, false, fmt.Errorf("%w: chunk %s missing from the store: %w", ErrCorrupt, d, err)
	}
	if err != nil {
		return raw, 0, false, err
	}
	out, err := s.decode(d, b, n, raw)
	if err != nil {
		return out, 0, false, err
	}
	if s.cache != nil {
		s.cache.put(d, b)
	}
	return out, int64(len(b)), false, nil
}

// decode decompresses a stored chunk of n raw bytes and checks its digest.
func (s *Store) decode(d string, b []byte, n int64, raw []byte) ([]byte, error) {
	out, err := s.dec.DecodeAll(b, raw[:0])
	if err != nil {
		return raw, fmt.Errorf("%w: chunk %s does not decompress: %w", ErrCorrupt, d, err)
	}
	if int64(len(out)) != n {
		return out, fmt.Errorf("%w: chunk %s has %d bytes, the manifest says %d", ErrCorrupt, d, len(out), n)
	}
	sum := sha256.Sum256(out)
	if hex.EncodeToString(sum[:]) != d {
		return out, fmt.Errorf("%w: chunk %s does not match its digest", ErrCorrupt, d)
	}
	return out, nil
}

// commit syncs the temporary files, gives them their modes and renames
// them to their names.
func (f *fetcher) commit(dir string) error {
	for i, t := range f.fs {
		file := f.m.Files[i]
		if err := t.Chmod(fs.FileMode(file.Mode)); err != nil {
			return fmt.Errorf("chunks: fetch %s: %s: %w", f.m.ID, file.Name, err)
		}
		if err := t.Sync(); err != nil {
			return fmt.Errorf("chunks: fetch %s: %s: %w", f.m.ID, file.Name, err)
		}
	}
	for i, t := range f.fs {
		if err := os.Rename(t.Name(), filepath.Join(dir, f.m.Files[i].Name)); err != nil {
			return fmt.Errorf("chunks: fetch %s: %s: %w", f.m.ID, f.m.Files[i].Name, err)
		}
		_ = t.Close()
		f.fs[i] = nil
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// cleanup removes the temporary files a failed fetch left.
func (f *fetcher) cleanup() {
	for _, t := range f.fs {
		if t != nil {
			_ = t.Close()
			_ = os.Remove(t.Name())
		}
	}
}
