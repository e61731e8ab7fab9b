package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Host states and admin states.
const (
	HostLive    = "live"
	HostDead    = "dead"
	HostRefused = "refused"

	AdminActive   = "active"
	AdminCordoned = "cordoned"
	AdminDraining = "draining"
)

// Capacity is what a host reports in each heartbeat: what it admits in all
// (its memory and vCPUs after its overcommit, less its reserve), its cap on
// sandboxes (0: none), how many run now, and what it can start fast: the
// templates it holds, and those with a warm pool or base snapshot.
type Capacity struct {
	MemMiB, VCPUs int64
	MaxSandboxes  int
	Running       int
	Templates     []string
	Warm          []string
}

// Host is one row of the hosts table.
type Host struct {
	Name, Addr, TokenHash string
	Epoch                 int64
	State, Admin, Reason  string
	LeaseUntil, Heartbeat time.Time
	Registered            time.Time
	Capacity
	// Used is what the fleet has placed there (its sandboxes' rows).
	UsedMemMiB, UsedVCPUs int64
	UsedSandboxes         int
}

// Placeable reports whether new sandboxes may go to h at now.
func (h Host) Placeable(now time.Time) bool {
	return h.State == HostLive && h.Admin == AdminActive && h.LeaseUntil.After(now)
}

const hostCols = `name, addr, token_hash, epoch, state, admin, reason, lease_until, heartbeat_at, registered_at,
	mem_mib, vcpus, max_sandboxes, running, templates, warm, used_mem_mib, used_vcpus, used_sandboxes`

func scanHost(r pgx.Row) (Host, error) {
	var h Host
	err := r.Scan(&h.Name, &h.Addr, &h.TokenHash, &h.Epoch, &h.State, &h.Admin, &h.Reason, &h.LeaseUntil, &h.Heartbeat,
		&h.Registered, &h.MemMiB, &h.VCPUs, &h.MaxSandboxes, &h.Running, &h.Templates, &h.Warm,
		&h.UsedMemMiB, &h.UsedVCPUs, &h.UsedSandboxes)
	return h, err
}

// recount sets a host's used counters from its sandboxes that are not lost.
const recount = `UPDATE hosts h SET
	used_mem_mib = COALESCE((SELECT sum(memory_mib) FROM sandboxes s WHERE s.host = h.name AND s.state <> 'lost'), 0),
	used_vcpus = COALESCE((SELECT sum(vcpus) FROM sandboxes s WHERE s.host = h.name AND s.state <> 'lost'), 0),
	used_sandboxes = (SELECT count(*) FROM sandboxes s WHERE s.host = h.name AND s.state <> 'lost')
	WHERE h.name = $1`

// Registration is what a host says of itself when it (re)joins.
type Registration struct {
	Name, Addr, TokenHash string
	TTL                   time.Duration
	Capacity
}

// Register adds the host or, when it is known, starts its next epoch: a
// host that comes back (after a restart, or after its lease lapsed) always
// gets a new epoch, so writes of its previous life are fenced. It returns
// the new epoch and the sandboxes the host owns in it: every row of the
// host's that is not lost. The host stops any VM it runs that is not
// among them.
func (s *Store) Register(ctx context.Context, r Registration) (epoch int64, owned []string, err error) {
	err = s.tx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO hosts (name, addr, token_hash, lease_until, mem_mib, vcpus, max_sandboxes, running, templates, warm)
			VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond', $5, $6, $7, $8, $9, $10)
			ON CONFLICT (name) DO UPDATE SET addr = EXCLUDED.addr, token_hash = EXCLUDED.token_hash,
				epoch = hosts.epoch + 1, state = 'live', reason = '', lease_until = EXCLUDED.lease_until,
				heartbeat_at = now(), registered_at = now(), mem_mib = EXCLUDED.mem_mib, vcpus = EXCLUDED.vcpus,
				max_sandboxes = EXCLUDED.max_sandboxes, running = EXCLUDED.running,
				templates = EXCLUDED.templates, warm = EXCLUDED.warm
			RETURNING epoch`,
			r.Name, r.Addr, r.TokenHash, r.TTL.Milliseconds(), r.MemMiB, r.VCPUs, r.MaxSandboxes, r.Running,
			nonNil(r.Templates), nonNil(r.Warm)).Scan(&epoch)
		if err != nil {
			return err
		}
		// Rows still being placed from a previous life never got a VM.
		if _, err := tx.Exec(ctx, `DELETE FROM sandboxes WHERE host = $1 AND state = 'placing' AND host_epoch < $2`, r.Name, epoch); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE sandboxes SET host_epoch = $2 WHERE host = $1 AND state <> 'lost' RETURNING id`, r.Name, epoch)
		if err != nil {
			return err
		}
		if owned, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, recount, r.Name)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("fleet store: register %s: %w", r.Name, err)
	}
	return epoch, owned, nil
}

// Heartbeat extends the host's lease by ttl and records its capacity. It
// fails with ErrFenced when epoch is no longer the host's (its lease
// lapsed and the leader ended that epoch, or it registered again).
func (s *Store) Heartbeat(ctx context.Context, name string, epoch int64, ttl time.Duration, c Capacity) error {
	tag, err := s.pool.Exec(ctx, `UPDATE hosts SET lease_until = now() + $3 * interval '1 millisecond', heartbeat_at = now(),
		mem_mib = $4, vcpus = $5, max_sandboxes = $6, running = $7, templates = $8, warm = $9
		WHERE name = $1 AND epoch = $2 AND state = 'live'`,
		name, epoch, ttl.Milliseconds(), c.MemMiB, c.VCPUs, c.MaxSandboxes, c.Running, nonNil(c.Templates), nonNil(c.Warm))
	if err != nil {
		return fmt.Errorf("fleet store: heartbeat %s: %w", name, wrap(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: host %s epoch %d", ErrFenced, name, epoch)
	}
	return nil
}

// Hosts lists every host, by name.
func (s *Store) Hosts(ctx context.Context) ([]Host, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+hostCols+` FROM hosts ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("fleet store: hosts: %w", wrap(err))
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Host, error) { return scanHost(r) })
	return hs, wrap(err)
}

// GetHost returns one host.
func (s *Store) GetHost(ctx context.Context, name string) (Host, error) {
	h, err := scanHost(s.pool.QueryRow(ctx, `SELECT `+hostCols+` FROM hosts WHERE name = $1`, name))
	if err != nil {
		return Host{}, fmt.Errorf("fleet store: host %s: %w", name, wrap(err))
	}
	return h, nil
}

// SetAdmin cordons, drains or reactivates a host.
func (s *Store) SetAdmin(ctx context.Context, name, admin string) (Host, error) {
	h, err := scanHost(s.pool.QueryRow(ctx, `UPDATE hosts SET admin = $2 WHERE name = $1 RETURNING `+hostCols, name, admin))
	if err != nil {
		return Host{}, fmt.Errorf("fleet store: host %s: %w", name, wrap(err))
	}
	return h, nil
}

// Refuse marks a host whose token the control plane does not accept: no
// work goes to it until it registers again with the right one.
func (s *Store) Refuse(ctx context.Context, name string, epoch int64, reason string) error {
	_, err := s.pool.Exec(ctx, `UPDATE hosts SET state = 'refused', reason = $3 WHERE name = $1 AND epoch = $2 AND state = 'live'`, name, epoch, reason)
	return wrap(err)
}

// Expired is a host whose lease the leader ended, and what it had.
type Expired struct {
	Host       string
	LeaseUntil time.Time
	Lost       int
	// Paused is how many of its sandboxes had a durable snapshot: they
	// became paused, to resume on another host.
	Paused int
}

// ExpireLeases ends the epoch of every live host whose lease lapsed before
// the database's now: the host becomes dead, its epoch is bumped (fencing
// whatever its old life still writes) and its sandboxes become lost with
// the reason, but those with a durable snapshot, which become paused (they
// resume from it on another host). Only the leader calls it.
func (s *Store) ExpireLeases(ctx context.Context) ([]Expired, error) {
	var out []Expired
	err := s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE hosts SET state = 'dead', epoch = epoch + 1,
			reason = 'lease expired at ' || to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
			WHERE state = 'live' AND lease_until < now() RETURNING name, lease_until`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Expired, error) {
			var e Expired
			return e, r.Scan(&e.Host, &e.LeaseUntil)
		})
		if err != nil {
			return err
		}
		for i, e := range out {
			at := e.LeaseUntil.UTC().Format(time.RFC3339Nano)
			tag, err := tx.Exec(ctx, `UPDATE sandboxes SET state = 'paused', generation = generation + 1, updated_at = now(),
				reason = 'host ' || host || ' stopped answering (its lease expired at ' || $2 || '); it resumes from its durable snapshot of '
					|| to_char(durable_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || ' on another host'
				WHERE host = $1 AND state IN ('running', 'paused') AND durable_manifest <> ''`, e.Host, at)
			if err != nil {
				return err
			}
			out[i].Paused = int(tag.RowsAffected())
			tag, err = tx.Exec(ctx, `UPDATE sandboxes SET state = 'lost', generation = generation + 1, updated_at = now(),
				reason = 'host ' || host || ' stopped answering: its lease expired at ' || $2
				WHERE host = $1 AND state <> 'lost' AND NOT (state = 'paused' AND durable_manifest <> '')`, e.Host, at)
			if err != nil {
				return err
			}
			out[i].Lost = int(tag.RowsAffected())
			if _, err := tx.Exec(ctx, recount, e.Host); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fleet store: expire leases: %w", err)
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
