package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentbox/agentbox/fleet/store"
)

// newLeader returns the fleet's leader for this replica.
func newLeader(st *store.Store, secret []byte, ttl time.Duration, log *slog.Logger) interface{ Run(context.Context) error } {
	return nil // wired to fleet/lease at merge
}
