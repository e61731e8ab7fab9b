package chunks_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/snapshot/chunks"
)

// BenchmarkExportFetch256 exports and fetches a 256 MiB memory-like file
// (half holes, a quarter random, a quarter compressible) through s3test
// on loopback, with the default chunk size and parallelism, and reports
// MiB/s of the file's logical size. Each iteration uses a fresh bucket
// key space (a new manifest of new content) and a cold cache.
func BenchmarkExportFetch256(b *testing.B) {
	const size = 256 << 20
	dir := b.TempDir()
	p := filepath.Join(dir, "memory")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	if _, err := f.WriteAt(random(b, size/4), 0); err != nil {
		b.Fatal(err)
	}
	text := bytes.Repeat([]byte("agentbox page cache line 0123456789\n"), size/4/36+1)[:size/4]
	if _, err := f.WriteAt(text, size/2); err != nil {
		b.Fatal(err)
	}
	_ = f.Close()
	var exp, fet float64
	for i := 0; b.Loop(); i++ {
		_, bk := newBucket(b)
		s, err := chunks.New(chunks.Config{Bucket: bk, CacheDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		t0 := time.Now()
		m, est, err := s.Export(ctx, chunks.Manifest{ID: fmt.Sprintf("bench-%d", i), Kind: "paused"}, map[string]string{"memory": p})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		exp += t1.Sub(t0).Seconds()
		if _, err := s.Fetch(ctx, m, filepath.Join(b.TempDir(), "out")); err != nil {
			b.Fatal(err)
		}
		fet += time.Since(t1).Seconds()
		b.ReportMetric(float64(est.TransferBytes)/(1<<20), "stored-MiB")
		_ = s.Close()
	}
	n := float64(b.N)
	b.ReportMetric(float64(size>>20)*n/exp, "export-MiB/s")
	b.ReportMetric(float64(size>>20)*n/fet, "fetch-MiB/s")
}
