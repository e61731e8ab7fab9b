package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentbox/agentbox/fleet/lease"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/snapshot/chunks"
)

// newLeader returns this replica's candidacy for the fleet's leader
// (fleet/lease): whichever replica holds the lock expires the leases (and,
// with a snapshot store, collects unreferenced chunks).
func newLeader(st *store.Store, secret []byte, ttl time.Duration, log *slog.Logger) *lease.Leader {
	return &lease.Leader{Store: st, Secret: secret, TTL: ttl, Logger: log}
}

// chunkGrace is how long a chunk stays unreferenced before the collector
// deletes it. Writers acquire a chunk's reference before they look for it
// in the bucket, so the collector is safe without it; the grace keeps a
// chunk a moment longer for a writer that exported without references
// (a standalone host on the same bucket) and makes a mistake recoverable.
var chunkGrace = time.Hour

// chunkCollector is the leader's chunk GC over the fleet's bucket: the
// store's reference counts name the chunks no manifest holds, and each is
// deleted from the bucket (its key "chunks/<digest>" under the URL's
// prefix), then its row (fleet/store's CollectChunks).
func chunkCollector(storeURL, credsFile string, st *store.Store) (func(context.Context) (int, error), error) {
	bucket, err := chunks.OpenS3(storeURL, credsFile)
	if err != nil {
		return nil, err
	}
	del := func(ctx context.Context, digest string) error {
		return bucket.Delete(ctx, chunks.ChunkKey(digest))
	}
	return func(ctx context.Context) (int, error) {
		return st.CollectChunks(ctx, chunkGrace, del)
	}, nil
}
