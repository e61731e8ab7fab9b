package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/fleet/store/storetest"
	"github.com/agentbox/agentbox/internal/s3test"
	"github.com/agentbox/agentbox/snapshot/chunks"
)

// TestChunkCollector: the leader's collector, made from the gateway's
// --snapshot-store URL and credentials file, deletes an unreferenced
// chunk's object under the URL's prefix and keeps a referenced one.
func TestChunkCollector(t *testing.T) {
	st, _ := storetest.Open(t)
	srv := s3test.Start(t, "snaps")
	creds := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(creds, []byte(s3test.AccessKey+"\n"+s3test.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := chunkGrace
	chunkGrace = 0
	t.Cleanup(func() { chunkGrace = old })
	collect, err := chunkCollector("s3://snaps/fleet/a?endpoint="+srv.Endpoint, creds, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gone, kept := fmt.Sprintf("%064x", 1), fmt.Sprintf("%064x", 2)
	for _, d := range []string{gone, kept} {
		if err := srv.PutDirect("snaps", "fleet/a/"+chunks.ChunkKey(d), []byte("chunk")); err != nil {
			t.Fatal(err)
		}
	}
	refs := st.ChunkRefs()
	if err := refs.Acquire(ctx, "m1", []string{gone, kept}); err != nil {
		t.Fatal(err)
	}
	if err := refs.Acquire(ctx, "m2", []string{kept}); err != nil {
		t.Fatal(err)
	}
	if err := refs.Release(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if n, err := collect(ctx); err != nil || n != 1 {
		t.Fatalf("collect: %d %v", n, err)
	}
	keys, err := srv.Keys("snaps", "fleet/a/chunks/")
	if err != nil || len(keys) != 1 || keys[0] != "fleet/a/"+chunks.ChunkKey(kept) {
		t.Fatalf("left in the bucket: %v %v", keys, err)
	}
}
