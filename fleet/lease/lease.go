// Package lease is the fleet's leader (DESIGN R17): every control-plane
// replica runs a Leader, and the one that holds the fleet's advisory lock
// in PostgreSQL ends the leases of hosts that stopped heartbeating (their
// sandboxes become lost, their epoch is bumped so their old life is
// fenced) and refuses hosts whose registered token is not the one the
// fleet secret gives them.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/store"
)

// DefaultTTL is a host's lease unless told otherwise.
const DefaultTTL = 10 * time.Second

// Store is what the leader needs of the fleet's store (*store.Store).
type Store interface {
	TryLead(ctx context.Context, key int64) (*store.LeaderLock, error)
	ExtendLeases(ctx context.Context, ttl time.Duration) (int, error)
	ExpireLeases(ctx context.Context) ([]store.Expired, error)
	Hosts(ctx context.Context) ([]store.Host, error)
	Refuse(ctx context.Context, name string, epoch int64, reason string) error
}

// Leader takes the lead when it can and, while it holds it, expires
// leases and refuses hosts with a wrong token. The zero values of its
// fields but Store take the defaults.
type Leader struct {
	Store Store
	// Secret is the fleet secret host tokens derive from; nil checks no
	// tokens.
	Secret []byte
	// TTL is the hosts' lease (DefaultTTL): the lead extends every live
	// lease by it when taken, and checks for lapsed ones every TTL/5.
	TTL time.Duration
	// Key is the advisory lock (store.LeaderKey).
	Key    int64
	Logger *slog.Logger
	// Name names this replica in the logs.
	Name string
	// Collect, if set, deletes the snapshot chunks no manifest
	// references (fleet/store's CollectChunks over the fleet's bucket) and
	// returns how many; the leader runs it every CollectEvery (default
	// 10 minutes) while it leads.
	Collect      func(ctx context.Context) (int, error)
	CollectEvery time.Duration

	leading        atomic.Bool
	expired, lost  atomic.Int64
	refused, terms atomic.Int64
	paused         atomic.Int64
	collected      atomic.Int64
	once           sync.Once
}

// Counters are the leader's totals since it started.
type Counters struct {
	// Terms is how many times this replica took the lead.
	Terms int64
	// LeasesExpired and SandboxesLost are what its expiries ended;
	// SandboxesPaused the sandboxes they kept from a durable snapshot.
	LeasesExpired, SandboxesLost, SandboxesPaused int64
	// ChunksCollected is how many unreferenced chunks its GC deleted.
	ChunksCollected int64
	// HostsRefused is how many hosts it refused for their token.
	HostsRefused int64
}

// IsLeader reports whether this replica holds the lead now.
func (l *Leader) IsLeader() bool { return l.leading.Load() }

// Counters returns the leader's totals.
func (l *Leader) Counters() Counters {
	return Counters{Terms: l.terms.Load(), LeasesExpired: l.expired.Load(), SandboxesLost: l.lost.Load(), HostsRefused: l.refused.Load(),
		SandboxesPaused: l.paused.Load(), ChunksCollected: l.collected.Load()}
}

// Metrics writes the counters in Prometheus' text format.
func (l *Leader) Metrics() string {
	c := l.Counters()
	lead := 0
	if l.IsLeader() {
		lead = 1
	}
	return fmt.Sprintf(`# HELP agentbox_fleet_leader Whether this replica leads the fleet.
# TYPE agentbox_fleet_leader gauge
agentbox_fleet_leader %d
# HELP agentbox_fleet_leader_terms_total Times this replica took the lead.
# TYPE agentbox_fleet_leader_terms_total counter
agentbox_fleet_leader_terms_total %d
# HELP agentbox_fleet_leases_expired_total Host leases this replica expired.
# TYPE agentbox_fleet_leases_expired_total counter
agentbox_fleet_leases_expired_total %d
# HELP agentbox_fleet_sandboxes_lost_total Sandboxes marked lost by this replica's expiries.
# TYPE agentbox_fleet_sandboxes_lost_total counter
agentbox_fleet_sandboxes_lost_total %d
# HELP agentbox_fleet_hosts_refused_total Hosts this replica refused for a wrong token.
# TYPE agentbox_fleet_hosts_refused_total counter
agentbox_fleet_hosts_refused_total %d
# HELP agentbox_fleet_sandboxes_paused_total Sandboxes of dead hosts kept paused from a durable snapshot.
# TYPE agentbox_fleet_sandboxes_paused_total counter
agentbox_fleet_sandboxes_paused_total %d
# HELP agentbox_fleet_chunks_collected_total Unreferenced snapshot chunks this replica deleted.
# TYPE agentbox_fleet_chunks_collected_total counter
agentbox_fleet_chunks_collected_total %d
`, lead, c.Terms, c.LeasesExpired, c.SandboxesLost, c.HostsRefused, c.SandboxesPaused, c.ChunksCollected)
}

func (l *Leader) defaults() {
	l.once.Do(func() {
		if l.TTL <= 0 {
			l.TTL = DefaultTTL
		}
		if l.Key == 0 {
			l.Key = store.LeaderKey
		}
		if l.Logger == nil {
			l.Logger = slog.Default()
		}
		if l.CollectEvery <= 0 {
			l.CollectEvery = 10 * time.Minute
		}
	})
}

// Run tries to take the lead every TTL/5 and, while it holds it, leads;
// when its lock's connection is lost it steps down and tries again. It
// returns when ctx ends.
func (l *Leader) Run(ctx context.Context) error {
	l.defaults()
	tick := l.TTL / 5
	log := l.Logger.With("replica", l.Name)
	for {
		lock, err := l.Store.TryLead(ctx, l.Key)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.Warn("fleet leader: cannot reach the database", "err", err)
		case lock != nil:
			l.lead(ctx, lock, tick, log)
			lock.Release(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(tick):
		}
	}
}

// lead holds the lead until ctx ends or lock's connection is lost.
func (l *Leader) lead(ctx context.Context, lock *store.LeaderLock, tick time.Duration, log *slog.Logger) {
	// A leader change or a database outage left hosts unable to
	// heartbeat: they get a lease's time before anyone expires them.
	n, err := l.Store.ExtendLeases(ctx, l.TTL)
	if err != nil {
		log.Warn("fleet leader: extend leases on taking the lead", "err", err)
		return
	}
	l.leading.Store(true)
	defer l.leading.Store(false)
	l.terms.Add(1)
	log.Info("fleet leader: took the lead", "leases_extended", n, "ttl", l.TTL)
	t := time.NewTicker(tick)
	defer t.Stop()
	if l.Collect != nil {
		gctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); l.collect(gctx, log) }()
		defer func() { stop(); wg.Wait() }()
	}
	for {
		if err := lock.Check(ctx); err != nil {
			if ctx.Err() == nil {
				log.Warn("fleet leader: lost the lock's connection; stepping down", "err", err)
			}
			return
		}
		if err := l.round(ctx, log); err != nil && ctx.Err() == nil {
			log.Warn("fleet leader: round", "err", err)
			if errors.Is(err, store.ErrUnavailable) {
				// Leases can't be trusted across an outage: take the lead
				// (and extend them) again.
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// collect runs Collect every CollectEvery until ctx ends (the lead is
// lost or the replica stops).
func (l *Leader) collect(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(l.CollectEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := l.Collect(ctx)
		l.collected.Add(int64(n))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("fleet leader: chunk collection", "chunks_deleted", n, "err", err)
		case n > 0:
			log.Info("fleet leader: collected unreferenced chunks", "chunks_deleted", n)
		}
	}
}

// round expires lapsed leases and refuses hosts with a wrong token.
func (l *Leader) round(ctx context.Context, log *slog.Logger) error {
	exp, err := l.Store.ExpireLeases(ctx)
	if err != nil {
		return err
	}
	for _, e := range exp {
		l.expired.Add(1)
		l.lost.Add(int64(e.Lost))
		l.paused.Add(int64(e.Paused))
		log.Warn("fleet leader: host lease expired", "host", e.Host, "lease_until", e.LeaseUntil, "sandboxes_lost", e.Lost,
			"sandboxes_paused", e.Paused)
	}
	if l.Secret == nil {
		return nil
	}
	hosts, err := l.Store.Hosts(ctx)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if h.State != store.HostLive || hosttoken.Equal(h.TokenHash, hosttoken.Hash(hosttoken.Token(l.Secret, h.Name))) {
			continue
		}
		reason := fmt.Sprintf("host %s registered a token that the fleet secret does not give it (check its --fleet-secret-file or AGENTBOX_FLEET_SECRET)", h.Name)
		if err := l.Store.Refuse(ctx, h.Name, h.Epoch, reason); err != nil {
			return err
		}
		l.refused.Add(1)
		log.Warn("fleet leader: host refused", "host", h.Name, "epoch", h.Epoch, "reason", reason)
	}
	return nil
}
