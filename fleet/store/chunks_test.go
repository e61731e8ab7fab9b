package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/fleet/store/storetest"
	"github.com/agentbox/agentbox/internal/s3test"
	"github.com/agentbox/agentbox/snapshot/chunks"
)

var _ chunks.Refs = (*store.ChunkRefs)(nil)

func digest(i int) string { return fmt.Sprintf("%064x", i) }

func TestChunkRefsCountAndCollect(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	refs := st.ChunkRefs()
	a, b, c := digest(1), digest(2), digest(3)
	for _, call := range []struct {
		m  string
		ds []string
	}{{"m1", []string{b, a, a}}, {"m1", []string{a}}, {"m2", []string{b, c}}} {
		if err := refs.Acquire(ctx, call.m, call.ds); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{a: 1, b: 2, c: 1}
	for d, n := range want {
		if got, err := refs.Refcount(ctx, d); err != nil || got != n {
			t.Fatalf("refcount of %s: %d %v, want %d", d[60:], got, err, n)
		}
	}
	if err := refs.Release(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := refs.Release(ctx, "m1"); err != nil { // twice: nothing more
		t.Fatal(err)
	}
	var deleted []string
	del := func(_ context.Context, d string) error { deleted = append(deleted, d); return nil }
	if n, err := st.CollectChunks(ctx, time.Hour, del); err != nil || n != 0 {
		t.Fatalf("collect within the grace period: %d %v", n, err)
	}
	if n, err := st.CollectChunks(ctx, 0, del); err != nil || n != 1 || !slices.Equal(deleted, []string{a}) {
		t.Fatalf("collect: %d %v, deleted %v", n, err, deleted)
	}
	if got, _ := refs.Refcount(ctx, b); got != 1 {
		t.Fatalf("b after m1's release: %d", got)
	}
	// A failing delete keeps the row: the next collection retries it.
	if err := refs.Release(ctx, "m2"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CollectChunks(ctx, 0, func(context.Context, string) error { return os.ErrPermission }); err == nil {
		t.Fatal("a failing delete did not fail the collection")
	}
	deleted = nil
	if n, err := st.CollectChunks(ctx, 0, del); err != nil || n != 2 {
		t.Fatalf("collect after a failure: %d %v (%v)", n, err, deleted)
	}
}

// TestCollectorRacesWriter exports snapshots that share chunks through a
// real bucket while the collector runs with no grace period: every
// snapshot not yet deleted fetches whole, though the chunks it shares with
// deleted ones fall to zero references and back again.
func TestCollectorRacesWriter(t *testing.T) {
	st, _ := open(t)
	srv := s3test.Start(t, "snaps")
	cfg, err := chunks.ParseURL("s3://snaps/fleet?endpoint=" + srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AccessKey, cfg.SecretKey = s3test.AccessKey, s3test.SecretKey
	bucket, err := chunks.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const cs = 16 << 10
	cs1, err := chunks.New(chunks.Config{Bucket: bucket, ChunkSize: cs, Parallel: 4, Refs: st.ChunkRefs()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := make([][]byte, 6)
	for i := range pool {
		pool[i] = make([]byte, cs)
		_, _ = rand.Read(pool[i])
	}
	var wg sync.WaitGroup
	collected := 0
	var collectErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			n, err := st.CollectChunks(ctx, 0, func(ctx context.Context, d string) error {
				return bucket.Delete(ctx, chunks.ChunkKey(d))
			})
			collected += n
			if err != nil && ctx.Err() == nil {
				collectErr = err
				return
			}
		}
	}()
	dir := t.TempDir()
	prev := ""
	for i := range 30 {
		// Each snapshot: 3 chunks of the pool (shared, rotating) and one of its own.
		var content []byte
		for k := range 3 {
			content = append(content, pool[(i+k)%len(pool)]...)
		}
		own := make([]byte, cs)
		_, _ = rand.Read(own)
		content = append(content, own...)
		p := filepath.Join(dir, "src")
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("w-%d", i)
		m, _, err := cs1.Export(ctx, chunks.Manifest{ID: id, Kind: "snapshot"}, map[string]string{"f": p})
		if err != nil {
			t.Fatal(err)
		}
		if prev != "" {
			if err := cs1.Delete(ctx, prev); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(dir, id)
		if _, err := cs1.Fetch(ctx, m, out); err != nil {
			t.Fatalf("%s, live, does not fetch: %v", id, err)
		}
		got, err := os.ReadFile(filepath.Join(out, "f"))
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("%s: content differs (%v)", id, err)
		}
		prev = id
	}
	cancel()
	wg.Wait()
	if collectErr != nil {
		t.Fatal(collectErr)
	}
	// Every deleted snapshot's own chunk is collectable, and collected now.
	n, err := st.CollectChunks(context.Background(), 0, func(ctx context.Context, d string) error {
		return bucket.Delete(ctx, chunks.ChunkKey(d))
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := srv.Keys("snaps", "fleet/chunks/")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 { // the live snapshot's
		t.Fatalf("%d chunks left in the bucket after collecting %d+%d, want the live snapshot's 4", len(keys), collected, n)
	}
}

// TestChunksMigrationAfterDurable: a database already at 00003 (issue 40's
// durable columns, deployed first) takes the chunk tables. They are 00004,
// not the 00002 once reserved: goose refuses a migration numbered below
// the database's version ("detected 1 missing (out-of-order) migration").
func TestChunksMigrationAfterDurable(t *testing.T) {
	pg := storetest.Server(t)
	db, err := sql.Open("pgx", pg.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = stdlib.GetDefaultDriver()
	fsys := fstest.MapFS{}
	for _, n := range []string{"00001_fleet.sql", "00003_durable.sql"} {
		b, err := os.ReadFile(filepath.Join("migrations", n))
		if err != nil {
			t.Fatal(err)
		}
		fsys[n] = &fstest.MapFile{Data: b}
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), pg.DSN(""))
	if err != nil {
		t.Fatalf("open a database at 00003: %v", err)
	}
	defer st.Close()
	if err := st.ChunkRefs().Acquire(context.Background(), "m", []string{digest(1)}); err != nil {
		t.Fatal(err)
	}
}

// TestChunkRefsConcurrent: writers acquiring and releasing overlapping
// digests in different orders neither deadlock nor lose a count.
func TestChunkRefsConcurrent(t *testing.T) {
	st, _ := open(t)
	ctx := context.Background()
	refs := st.ChunkRefs()
	var ds []string
	for i := range 20 {
		ds = append(ds, digest(i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 8 {
				mine := slices.Clone(ds)
				if w%2 == 1 {
					slices.Reverse(mine)
				}
				m := fmt.Sprintf("w%d-r%d", w, round)
				if err := refs.Acquire(ctx, m, mine); err != nil {
					errs <- err
					return
				}
				if round%2 == 0 {
					if err := refs.Release(ctx, m); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, d := range ds { // 4 writers x 4 manifests kept each
		if n, err := refs.Refcount(ctx, d); err != nil || n != 16 {
			t.Fatalf("refcount of %s: %d %v, want 16", d[56:], n, err)
		}
	}
}
