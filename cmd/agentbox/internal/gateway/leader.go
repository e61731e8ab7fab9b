package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentbox/agentbox/fleet/lease"
	"github.com/agentbox/agentbox/fleet/store"
)

// newLeader returns this replica's candidacy for the fleet's leader
// (fleet/lease): whichever replica holds the lock expires the leases (and,
// with a snapshot store, collects unreferenced chunks).
func newLeader(st *store.Store, secret []byte, ttl time.Duration, log *slog.Logger) *lease.Leader {
	return &lease.Leader{Store: st, Secret: secret, TTL: ttl, Logger: log}
}

// chunkCollector is the leader's chunk GC over the fleet's bucket: the
// store's reference counts name the chunks no manifest holds, and each is
// deleted from the bucket, then its row (issue 40a's CollectChunks).
//
// Until issue 40a's snapshot/chunks and fleet/store's CollectChunks are
// merged it collects nothing.
func chunkCollector(storeURL, credsFile string, st *store.Store) (func(context.Context) (int, error), error) {
	_, _, _ = storeURL, credsFile, st
	return nil, nil
}
