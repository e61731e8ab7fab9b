package chunks_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/s3test"
	"github.com/agentbox/agentbox/snapshot/chunks"
)

const (
	testBucket = "snaps"
	testPrefix = "fleet"
	cs         = 64 << 10 // chunk size of the tests
)

// newBucket starts an s3test server and returns it with a bucket on it.
func newBucket(t testing.TB) (*s3test.Server, chunks.Bucket) {
	t.Helper()
	srv := s3test.Start(t, testBucket)
	cfg, err := chunks.ParseURL("s3://" + testBucket + "/" + testPrefix + "?endpoint=" + srv.Endpoint + "&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.AccessKey, cfg.SecretKey = s3test.AccessKey, s3test.SecretKey
	b, err := chunks.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv, b
}

func newStore(t *testing.T, b chunks.Bucket, mod func(*chunks.Config)) *chunks.Store {
	t.Helper()
	cfg := chunks.Config{Bucket: b, CacheDir: t.TempDir(), CacheBytes: 64 << 20, ChunkSize: cs, Parallel: 4}
	if mod != nil {
		mod(&cfg)
	}
	s, err := chunks.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// writeFiles writes name -> content into a new directory and returns the
// Export map. A content of nil plus a size in sparse makes a sparse file.
func writeFiles(t *testing.T, files map[string][]byte) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	for n, b := range files {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, b, 0o640); err != nil {
			t.Fatal(err)
		}
		out[n] = p
	}
	return out
}

func checkFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for n, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes differ from the %d exported", n, len(got), len(want))
		}
	}
	des, _ := os.ReadDir(dir)
	if len(des) != len(files) {
		t.Fatalf("%s holds %d entries, want %d (no temp files)", dir, len(des), len(files))
	}
}

// mixed is content with zeros, random and repeated chunks, and a tail
// shorter than a chunk.
func mixed(t *testing.T) []byte {
	r := random(t, cs)
	var b []byte
	b = append(b, make([]byte, 3*cs)...) // zeros
	b = append(b, r...)
	b = append(b, random(t, 2*cs)...)
	b = append(b, r...) // repeated
	b = append(b, make([]byte, cs)...)
	b = append(b, r...)
	b = append(b, random(t, 1000)...) // tail
	return b
}

func TestRoundTrip(t *testing.T) {
	srv, b := newBucket(t)
	s := newStore(t, b, nil)
	ctx := context.Background()
	files := map[string][]byte{
		"memory": mixed(t),
		"zeros":  make([]byte, 5*cs+7),
		"empty":  {},
		"small":  []byte("hello"),
	}
	m, st, err := s.Export(ctx, chunks.Manifest{ID: "snap-1", Kind: "snapshot", Requires: map[string]string{"kernel": "sha256:ab"}}, writeFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	// memory: 3 zero + r + 2 random + r + zero + r + tail = 10 chunks, 4 zero,
	// 4 distinct stored (r, 2 random, tail); small: 1 chunk; zeros: 6 zero chunks.
	if st.Files != 4 || st.Chunks != 17 || st.ZeroChunks != 10 || st.Uploaded != 5 {
		t.Fatalf("export stats %+v", st)
	}
	if got := srv.Count("PUT", testPrefix+"/chunks/"); got != 5 {
		t.Fatalf("%d chunk PUTs, want 5", got)
	}
	got, err := s.Manifest(ctx, "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != m.ID || len(got.Files) != 4 || got.Requires["kernel"] != "sha256:ab" || got.Created.IsZero() {
		t.Fatalf("stored manifest %+v", got)
	}
	dir := filepath.Join(t.TempDir(), "out")
	fst, err := newStore(t, b, nil).Fetch(ctx, got, dir)
	if err != nil {
		t.Fatal(err)
	}
	if fst.Fetched != 5 || fst.CacheHits != 0 || fst.Bytes != st.Bytes {
		t.Fatalf("fetch stats %+v", fst)
	}
	checkFiles(t, dir, files)
	fi, err := os.Stat(filepath.Join(dir, "memory"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
}

func TestSparseFile(t *testing.T) {
	_, b := newBucket(t)
	s := newStore(t, b, nil)
	p := filepath.Join(t.TempDir(), "disk")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	data := random(t, 3000)
	const size = 1 << 30
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, size/2+100); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	ctx := context.Background()
	m, st, err := s.Export(ctx, chunks.Manifest{ID: "sparse", Kind: "paused"}, map[string]string{"disk": p})
	if err != nil {
		t.Fatal(err)
	}
	if st.Chunks != size/cs || st.ZeroChunks != size/cs-1 || st.Uploaded != 1 {
		t.Fatalf("stats %+v", st)
	}
	dir := t.TempDir()
	if _, err := s.Fetch(ctx, m, dir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "disk")
	fi, err := os.Stat(out)
	if err != nil || fi.Size() != size {
		t.Fatalf("size %v %v", fi, err)
	}
	if blocks := allocated(t, out); blocks > 1<<20 {
		t.Fatalf("fetched file allocates %d bytes: holes were written", blocks)
	}
	g, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := make([]byte, len(data))
	if _, err := g.ReadAt(got, size/2+100); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("data in the sparse file differs (%v)", err)
	}
}

// TestSharedChunks: a second export of a file that shares chunks with the
// first (a fork of a template) uploads only the new chunks.
func TestSharedChunks(t *testing.T) {
	srv, b := newBucket(t)
	ctx := context.Background()
	base := random(t, 8*cs)
	if _, _, err := newStore(t, b, nil).Export(ctx, chunks.Manifest{ID: "template", Kind: "template"}, writeFiles(t, map[string][]byte{"disk": base})); err != nil {
		t.Fatal(err)
	}
	fork := bytes.Clone(base)
	copy(fork[2*cs:], random(t, cs))
	fork = append(fork, random(t, cs)...)
	srv.ResetCounts()
	// A new Store (another host): it learns what the bucket has by asking.
	m, st, err := newStore(t, b, nil).Export(ctx, chunks.Manifest{ID: "fork", Kind: "snapshot", Parent: "template"}, writeFiles(t, map[string][]byte{"disk": fork}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Uploaded != 2 || srv.Count("PUT", testPrefix+"/chunks/") != 2 {
		t.Fatalf("fork uploaded %d chunks (%d PUTs), want 2", st.Uploaded, srv.Count("PUT", testPrefix+"/chunks/"))
	}
	if st.StoredBytes == 0 || st.TransferBytes >= st.StoredBytes {
		t.Fatalf("stored %d, transferred %d", st.StoredBytes, st.TransferBytes)
	}
	dir := t.TempDir()
	if _, err := newStore(t, b, nil).Fetch(ctx, m, dir); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, map[string][]byte{"disk": fork})
}

func TestCorruptChunk(t *testing.T) {
	srv, b := newBucket(t)
	s := newStore(t, b, func(c *chunks.Config) { c.CacheDir = "" })
	ctx := context.Background()
	files := map[string][]byte{"a": random(t, 3*cs), "b": random(t, 2*cs)}
	m, _, err := s.Export(ctx, chunks.Manifest{ID: "c", Kind: "snapshot"}, writeFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	victim := m.Files[1].Chunks[1].Digest // b's second chunk
	if err := srv.Flip(testBucket, testPrefix+"/"+chunks.ChunkKey(victim), 100); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err = s.Fetch(ctx, m, dir)
	if !errors.Is(err, chunks.ErrCorrupt) || !strings.Contains(err.Error(), "b chunk 1") {
		t.Fatalf("fetch of a flipped chunk: %v", err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Fatalf("a failed fetch left %d files in %s", len(des), dir)
	}
	// A chunk missing from the store is refused too.
	if err := b.Delete(ctx, chunks.ChunkKey(victim)); err != nil {
		t.Fatal(err)
	}
	if _, err = s.Fetch(ctx, m, dir); !errors.Is(err, chunks.ErrCorrupt) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("fetch of a missing chunk: %v", err)
	}
}

func TestStoreDown(t *testing.T) {
	srv, b := newBucket(t)
	s := newStore(t, b, nil)
	ctx := context.Background()
	files := writeFiles(t, map[string][]byte{"m": random(t, 2*cs)})
	m, _, err := s.Export(ctx, chunks.Manifest{ID: "up", Kind: "paused"}, files)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetDown(true)
	if _, _, err := s.Export(ctx, chunks.Manifest{ID: "down", Kind: "paused"}, writeFiles(t, map[string][]byte{"m": random(t, cs)})); !errors.Is(err, chunks.ErrUnavailable) {
		t.Fatalf("export to a store that is down: %v", err)
	}
	if _, err := newStore(t, b, nil).Fetch(ctx, m, t.TempDir()); !errors.Is(err, chunks.ErrUnavailable) {
		t.Fatalf("fetch from a store that is down: %v", err)
	}
	srv.SetDown(false)
	if _, err := s.Manifest(ctx, "down"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed export's manifest: %v", err)
	}
	// A store nobody listens on.
	srv.Close()
	if _, _, err := s.Export(ctx, chunks.Manifest{ID: "gone", Kind: "paused"}, writeFiles(t, map[string][]byte{"m": random(t, cs)})); !errors.Is(err, chunks.ErrUnavailable) {
		t.Fatalf("export to a store that is gone: %v", err)
	}
}

func TestCache(t *testing.T) {
	srv, b := newBucket(t)
	ctx := context.Background()
	files := map[string][]byte{"a": random(t, 6*cs)}
	m, _, err := newStore(t, b, nil).Export(ctx, chunks.Manifest{ID: "a", Kind: "template"}, writeFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	s := newStore(t, b, func(c *chunks.Config) { c.CacheDir = cacheDir })
	srv.ResetCounts()
	if st, err := s.Fetch(ctx, m, t.TempDir()); err != nil || st.Fetched != 6 || st.CacheHits != 0 {
		t.Fatalf("first fetch: %+v %v", st, err)
	}
	dir := t.TempDir()
	st, err := s.Fetch(ctx, m, dir)
	if err != nil || st.Fetched != 0 || st.CacheHits != 6 || st.TransferBytes != 0 {
		t.Fatalf("second fetch: %+v %v", st, err)
	}
	checkFiles(t, dir, files)
	if n := srv.Count("GET", testPrefix+"/chunks/"); n != 6 {
		t.Fatalf("%d chunk GETs over two fetches, want 6", n)
	}
	// The cache survives a restart (a new Store on the same directory).
	s2 := newStore(t, b, func(c *chunks.Config) { c.CacheDir = cacheDir })
	if st, err := s2.Fetch(ctx, m, t.TempDir()); err != nil || st.CacheHits != 6 {
		t.Fatalf("fetch after a restart: %+v %v", st, err)
	}
}

func TestCacheEviction(t *testing.T) {
	_, b := newBucket(t)
	ctx := context.Background()
	// Random chunks do not compress: each is about cs bytes stored.
	ma, _, err := newStore(t, b, nil).Export(ctx, chunks.Manifest{ID: "a", Kind: "snapshot"}, writeFiles(t, map[string][]byte{"f": random(t, 4*cs)}))
	if err != nil {
		t.Fatal(err)
	}
	mb, _, err := newStore(t, b, nil).Export(ctx, chunks.Manifest{ID: "b", Kind: "snapshot"}, writeFiles(t, map[string][]byte{"f": random(t, 4*cs)}))
	if err != nil {
		t.Fatal(err)
	}
	bound := int64(6*cs + 1000)
	s := newStore(t, b, func(c *chunks.Config) { c.CacheBytes = bound })
	if _, err := s.Fetch(ctx, ma, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fetch(ctx, mb, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if s.CacheBytes() > bound {
		t.Fatalf("cache holds %d bytes, over its bound %d", s.CacheBytes(), bound)
	}
	// b was fetched last: all of it is cached; a lost at least two chunks.
	st, err := s.Fetch(ctx, mb, t.TempDir())
	if err != nil || st.CacheHits != 4 {
		t.Fatalf("refetch of the recent manifest: %+v %v", st, err)
	}
	st, err = s.Fetch(ctx, ma, t.TempDir())
	if err != nil || st.Fetched < 2 {
		t.Fatalf("refetch of the evicted manifest: %+v %v", st, err)
	}
}

// TestConcurrent runs exports and fetches at once, sharing chunks (run
// with -race).
func TestConcurrent(t *testing.T) {
	_, b := newBucket(t)
	s := newStore(t, b, nil)
	ctx := context.Background()
	shared := random(t, 3*cs)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			content := append(bytes.Clone(shared), random(t, cs+i)...)
			id := fmt.Sprintf("c-%d", i)
			m, _, err := s.Export(ctx, chunks.Manifest{ID: id, Kind: "snapshot"}, writeFiles(t, map[string][]byte{"f": content}))
			if err != nil {
				errs <- err
				return
			}
			dir := t.TempDir()
			if _, err := s.Fetch(ctx, m, dir); err != nil {
				errs <- err
				return
			}
			got, err := os.ReadFile(filepath.Join(dir, "f"))
			if err != nil || !bytes.Equal(got, content) {
				errs <- fmt.Errorf("%s: content differs (%v)", id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDeleteAndRefs(t *testing.T) {
	_, b := newBucket(t)
	refs := &memRefs{held: map[string][]string{}}
	s := newStore(t, b, func(c *chunks.Config) { c.Refs = refs })
	ctx := context.Background()
	m, _, err := s.Export(ctx, chunks.Manifest{ID: "r", Kind: "paused"}, writeFiles(t, map[string][]byte{"f": append(random(t, 2*cs), make([]byte, cs)...)}))
	if err != nil {
		t.Fatal(err)
	}
	if got := refs.held["r"]; len(got) != 2 {
		t.Fatalf("acquired %v, want the 2 data chunks", got)
	}
	if err := s.PutRef(ctx, "sandboxes", "sb-1", chunks.Ref{Manifest: m.ID, Generation: 3, Host: "h1"}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.GetRef(ctx, "sandboxes", "sb-1"); err != nil || r.Manifest != "r" || r.Generation != 3 {
		t.Fatalf("ref %+v %v", r, err)
	}
	if err := s.DeleteRef(ctx, "sandboxes", "sb-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRef(ctx, "sandboxes", "sb-1"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("deleted ref: %v", err)
	}
	if err := s.Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if _, ok := refs.held["r"]; ok {
		t.Fatal("Delete did not release the manifest's references")
	}
	if _, err := s.Manifest(ctx, "r"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("deleted manifest: %v", err)
	}
}

type memRefs struct {
	mu   sync.Mutex
	held map[string][]string
}

func (r *memRefs) Acquire(_ context.Context, m string, ds []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held[m] = append(r.held[m], ds...)
	return nil
}

func (r *memRefs) Release(_ context.Context, m string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, m)
	return nil
}

func TestReadCredentials(t *testing.T) {
	dir := t.TempDir()
	for what, c := range map[string]string{
		"two lines": "AK\nSK\n",
		"key=value": "# store\nAWS_ACCESS_KEY_ID=AK\naws_secret_access_key = SK\nAWS_REGION=x\n",
	} {
		p := filepath.Join(dir, "c")
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		if ak, sk, err := chunks.ReadCredentials(p); err != nil || ak != "AK" || sk != "SK" {
			t.Errorf("%s: %q %q %v", what, ak, sk, err)
		}
	}
	p := filepath.Join(dir, "bad")
	_ = os.WriteFile(p, []byte("only-one-line\n"), 0o600)
	if _, _, err := chunks.ReadCredentials(p); err == nil {
		t.Error("one line read as credentials")
	}
}

func TestParseURL(t *testing.T) {
	cfg, err := chunks.ParseURL("s3://b/p/q?endpoint=http://127.0.0.1:9000&region=eu-1&insecure=1")
	if err != nil || cfg.Bucket != "b" || cfg.Prefix != "p/q" || cfg.Endpoint != "http://127.0.0.1:9000" || cfg.Region != "eu-1" || !cfg.Insecure {
		t.Fatalf("%+v %v", cfg, err)
	}
	for _, bad := range []string{
		"http://b/p", "s3:///p", "s3://ak:sk@b/p", "s3://b/p?endpoint=ftp://x", "s3://b/p?color=red",
		"s3://b/a/../c", "s3://b/a//c",
	} {
		if _, err := chunks.ParseURL(bad); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

// TestMissingBucket: a bucket that does not exist is a store that is not
// there (ErrUnavailable), not a missing chunk.
func TestMissingBucket(t *testing.T) {
	srv := s3test.Start(t, testBucket)
	b, err := chunks.NewS3(chunks.S3Config{Endpoint: srv.Endpoint, Bucket: "nope", Region: "us-east-1",
		AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, b, nil)
	_, _, err = s.Export(context.Background(), chunks.Manifest{ID: "x", Kind: "paused"}, writeFiles(t, map[string][]byte{"f": random(t, cs)}))
	if !errors.Is(err, chunks.ErrUnavailable) {
		t.Fatalf("export to a missing bucket: %v", err)
	}
	if _, err := s.Manifest(context.Background(), "x"); !errors.Is(err, chunks.ErrUnavailable) {
		t.Fatalf("manifest from a missing bucket: %v", err)
	}
}
