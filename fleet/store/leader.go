package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaderKey is the advisory lock the fleet's leader holds (fleet/lease).
const LeaderKey int64 = 0x61626c656164 // "ablead"

// LeaderLock is a session advisory lock held on a connection of its own:
// it is held while that connection lives, and lost with it.
type LeaderLock struct {
	conn *pgx.Conn
	key  int64
}

// TryLead tries to take the advisory lock key on a new connection of its
// own. It returns nil and no error when another session holds it.
func (s *Store) TryLead(ctx context.Context, key int64) (*LeaderLock, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet store: leader connection: %w", wrap(err))
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("fleet store: leader lock: %w", wrap(err))
	}
	if !ok {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, nil
	}
	return &LeaderLock{conn: conn, key: key}, nil
}

// Check returns nil while the lock's connection answers (and so the lock
// is still held), else ErrUnavailable.
func (l *LeaderLock) Check(ctx context.Context) error {
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("fleet store: leader connection: %w", wrap(err))
	}
	return nil
}

// Release lets go of the lock by closing its connection.
func (l *LeaderLock) Release(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = l.conn.Close(cctx)
}

// EndLockHolder terminates the session that holds advisory lock key (an
// operator ends a stuck leader; tests cut a leader's connection), and
// reports how many sessions it ended.
func (s *Store) EndLockHolder(ctx context.Context, key int64) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = $1`, key)
	if err != nil {
		return 0, wrap(err)
	}
	ended, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	n := 0
	for _, e := range ended {
		if e {
			n++
		}
	}
	return n, wrap(err)
}

// ExtendLeases gives every live host's lease one more ttl from the later
// of its end and now: a new leader, or one back from a database outage,
// does not expire hosts that could not heartbeat meanwhile. It returns
// how many leases it extended.
func (s *Store) ExtendLeases(ctx context.Context, ttl time.Duration) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE hosts SET lease_until = greatest(lease_until, now()) + $1 * interval '1 millisecond'
		WHERE state = 'live'`, ttl.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("fleet store: extend leases: %w", wrap(err))
	}
	return int(tag.RowsAffected()), nil
}

// SetStates records the pause and resume states (StateRunning,
// StatePaused) that host, in epoch, sees of its sandboxes: only rows it
// owns in that epoch and that are not lost change, and nothing is written
// when epoch is not the host's (ErrFenced). It returns how many changed.
func (s *Store) SetStates(ctx context.Context, host string, epoch int64, states map[string]string) (int, error) {
	var n int
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var cur int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM hosts WHERE name = $1 FOR UPDATE`, host).Scan(&cur); err != nil {
			return err
		}
		if cur != epoch {
			return fmt.Errorf("%w: host %s epoch %d (now %d)", ErrFenced, host, epoch, cur)
		}
		for id, st := range states {
			if st != StateRunning && st != StatePaused {
				continue
			}
			tag, err := tx.Exec(ctx, `UPDATE sandboxes SET state = $4, generation = generation + 1, updated_at = now()
				WHERE id = $1 AND host = $2 AND host_epoch = $3 AND state IN ('running', 'paused') AND state <> $4`, id, host, epoch, st)
			if err != nil {
				return err
			}
			n += int(tag.RowsAffected())
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("fleet store: set states of %s: %w", host, err)
	}
	return n, nil
}
