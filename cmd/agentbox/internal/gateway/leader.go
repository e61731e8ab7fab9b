package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentbox/agentbox/fleet/lease"
	"github.com/agentbox/agentbox/fleet/store"
)

// newLeader returns this replica's candidacy for the fleet's leader
// (fleet/lease): whichever replica holds the lock expires the leases.
func newLeader(st *store.Store, secret []byte, ttl time.Duration, log *slog.Logger) interface{ Run(context.Context) error } {
	return &lease.Leader{Store: st, Secret: secret, TTL: ttl, Logger: log}
}
