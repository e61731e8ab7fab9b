// Package chunks stores files in an S3-compatible bucket as
// content-addressed chunks under a manifest, so a snapshot taken on one
// host can be restored on any (issue 40).
//
// A file is cut into fixed-size chunks (4 MiB by default); a chunk of
// zeros (a hole of a sparse file, or zero pages) is stored nowhere; any
// other is stored once, zstd-compressed, under "chunks/<sha256 of its raw
// bytes>", so files that share content (forks, templates, a paused
// sandbox and its snapshot) share chunks. A manifest
// ("manifests/<id>.json") is written after all its chunks: a manifest
// that exists is complete. Fetch goes through a local LRU cache bounded by
// bytes and verifies every chunk's digest; it writes under temporary names
// and renames only when every file is complete.
//
// Chunk references are counted by Refs (fleet/store on PostgreSQL in a
// fleet); garbage collection of unreferenced chunks is the fleet's
// (fleet/store's CollectChunks).
package chunks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Errors callers tell apart (wrapped with detail).
var (
	// ErrCorrupt is a chunk whose content does not match its digest (or
	// does not decompress), or a manifest that does not parse.
	ErrCorrupt = errors.New("snapshot store: corrupt data")
	// ErrUnavailable wraps a bucket that cannot be reached or refuses.
	ErrUnavailable = errors.New("snapshot store unavailable")
)

// Config configures a Store.
type Config struct {
	Bucket     Bucket
	CacheDir   string // local chunk cache (LRU); "" = no cache
	CacheBytes int64  // bound of the cache; 0 = 4 GiB
	ChunkSize  int    // default 4 MiB
	Parallel   int    // default 8 transfers in flight; memory bound = Parallel x ChunkSize x ~2
	Refs       Refs   // optional; nil = no reference counting (standalone host)
	Logger     *slog.Logger
}

// Refs counts chunk references (fleet/store implements it on Postgres).
// Acquire may be called more than once for a manifest: the references add
// up (a digest counts once per manifest).
type Refs interface {
	Acquire(ctx context.Context, manifest string, digests []string) error // before upload
	Release(ctx context.Context, manifest string) error
}

// Stats says what an Export or a Fetch did. Bytes is the files' logical
// size; StoredBytes the compressed size in the store of the distinct
// chunks the manifest references (where known); TransferBytes what went
// over the wire (compressed). Uploaded and Fetched count chunk transfers,
// CacheHits chunks served by the local cache.
type Stats struct {
	Files, Chunks, ZeroChunks, Uploaded, Fetched, CacheHits int
	Bytes, StoredBytes, TransferBytes                       int64
}

// Store is a chunk store on a bucket.
type Store struct {
	cfg   Config
	log   *slog.Logger
	cache *cache // nil without CacheDir
	enc   *zstd.Encoder
	dec   *zstd.Decoder

	mu    sync.Mutex
	known map[string]int64 // digests this Store saw in the bucket -> stored size (only without Refs)
}

// DefaultChunkSize is the default chunk size.
const DefaultChunkSize = 4 << 20

// New returns a Store on cfg.Bucket (which it does not contact).
func New(cfg Config) (*Store, error) {
	if cfg.Bucket == nil {
		return nil, errors.New("chunks: no bucket")
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.ChunkSize < 4096 || cfg.ChunkSize > MaxChunkLen || cfg.ChunkSize%4096 != 0 {
		return nil, fmt.Errorf("chunks: chunk size %d: a multiple of 4096 up to %d", cfg.ChunkSize, MaxChunkLen)
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 8
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 4 << 30
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(min(cfg.Parallel, runtime.GOMAXPROCS(0))))
	if err != nil {
		return nil, fmt.Errorf("chunks: zstd: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxChunkLen),
		zstd.WithDecoderMaxWindow(MaxChunkLen))
	if err != nil {
		return nil, fmt.Errorf("chunks: zstd: %w", err)
	}
	s := &Store{cfg: cfg, log: cfg.Logger, enc: enc, dec: dec, known: map[string]int64{}}
	if cfg.CacheDir != "" {
		c, err := openCache(cfg.CacheDir, cfg.CacheBytes)
		if err != nil {
			return nil, err
		}
		s.cache = c
	}
	return s, nil
}

// Close releases the Store's decoders (it holds no goroutines of its own
// between calls).
func (s *Store) Close() error {
	s.dec.Close()
	return nil
}

// CacheBytes is how many bytes the local cache holds now.
func (s *Store) CacheBytes() int64 {
	if s.cache == nil {
		return 0
	}
	return s.cache.used()
}

// ChunkKey is a chunk's key in the bucket.
func ChunkKey(digest string) string { return "chunks/" + digest }

// ManifestKey is a manifest's key in the bucket.
func ManifestKey(id string) string { return "manifests/" + id + ".json" }

// Manifest reads and parses manifest id (fs.ErrNotExist when absent).
func (s *Store) Manifest(ctx context.Context, id string) (Manifest, error) {
	if !ValidID(id) {
		return Manifest{}, fmt.Errorf("chunks: bad manifest id %q", trunc(id))
	}
	b, err := s.cfg.Bucket.Get(ctx, ManifestKey(id))
	if err != nil {
		return Manifest{}, fmt.Errorf("chunks: manifest %s: %w", id, err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if m.ID != id {
		return Manifest{}, fmt.Errorf("%w: manifest %s names itself %s", ErrCorrupt, id, m.ID)
	}
	return m, nil
}

// Delete removes manifest id (absent is not an error), then releases its
// chunk references. Its chunks stay until the fleet's collector finds
// them unreferenced.
func (s *Store) Delete(ctx context.Context, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("chunks: bad manifest id %q", trunc(id))
	}
	if err := s.cfg.Bucket.Delete(ctx, ManifestKey(id)); err != nil {
		return fmt.Errorf("chunks: delete manifest %s: %w", id, err)
	}
	if s.cfg.Refs != nil {
		if err := s.cfg.Refs.Release(ctx, id); err != nil {
			return fmt.Errorf("chunks: release manifest %s: %w", id, err)
		}
	}
	return nil
}

// Ref is a pointer "refs/<kind>/<name>" to a manifest: what a sandbox, a
// snapshot or a template is now in the store.
type Ref struct {
	Manifest   string `json:"manifest"`
	Generation int64  `json:"generation"`
	Host       string `json:"host,omitempty"`
}

var refPartRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func refKey(kind, name string) (string, error) {
	if !refPartRE.MatchString(kind) || !refPartRE.MatchString(name) || name == ".." || kind == ".." {
		return "", fmt.Errorf("chunks: bad ref %q/%q", trunc(kind), trunc(name))
	}
	return "refs/" + kind + "/" + name, nil
}

// PutRef writes the pointer kind/name.
func (s *Store) PutRef(ctx context.Context, kind, name string, r Ref) error {
	k, err := refKey(kind, name)
	if err != nil {
		return err
	}
	if !ValidID(r.Manifest) {
		return fmt.Errorf("chunks: ref %s: bad manifest id %q", k, trunc(r.Manifest))
	}
	b, _ := json.Marshal(r)
	if err := s.cfg.Bucket.Put(ctx, k, b); err != nil {
		return fmt.Errorf("chunks: put %s: %w", k, err)
	}
	return nil
}

// GetRef reads the pointer kind/name (fs.ErrNotExist when absent).
func (s *Store) GetRef(ctx context.Context, kind, name string) (Ref, error) {
	k, err := refKey(kind, name)
	if err != nil {
		return Ref{}, err
	}
	b, err := s.cfg.Bucket.Get(ctx, k)
	if err != nil {
		return Ref{}, fmt.Errorf("chunks: get %s: %w", k, err)
	}
	var r Ref
	if len(b) > 64<<10 || json.Unmarshal(b, &r) != nil || !ValidID(r.Manifest) {
		return Ref{}, fmt.Errorf("%w: ref %s does not parse", ErrCorrupt, k)
	}
	return r, nil
}

// DeleteRef removes the pointer kind/name (absent is not an error).
func (s *Store) DeleteRef(ctx context.Context, kind, name string) error {
	k, err := refKey(kind, name)
	if err != nil {
		return err
	}
	if err := s.cfg.Bucket.Delete(ctx, k); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("chunks: delete %s: %w", k, err)
	}
	return nil
}

func (s *Store) knownSize(d string) (int64, bool) {
	if s.cfg.Refs != nil {
		return 0, false // a collector may delete what this Store saw: ask the bucket
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.known[d]
	return n, ok
}

func (s *Store) setKnown(d string, n int64) {
	if s.cfg.Refs != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.known) > 1<<20 {
		clear(s.known)
	}
	s.known[d] = n
}

// now is the manifests' clock.
var now = time.Now
