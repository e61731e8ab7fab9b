package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sandbox states in the fleet's records. Placing is a reservation whose
// host has not yet answered the create.
const (
	StatePlacing = "placing"
	StateRunning = "running"
	StatePaused  = "paused"
	StateLost    = "lost"
)

// Sandbox is one row of the sandboxes table, with its host's address and
// state.
type Sandbox struct {
	ID, Project, Host  string
	HostEpoch, Gen     int64
	State, Reason      string
	Template, Parent   string
	MemoryMiB, VCPUs   int64
	Created, Updated   time.Time
	HostAddr           string
	HostState          string
	HostEpochOfHostNow int64
	// Durable is the manifest of the sandbox's last snapshot that is
	// durable in object storage ("" = none), taken at DurableAt.
	Durable   string
	DurableAt time.Time
	// MovingUntil, while in the future, marks a sandbox a migrate is
	// moving between hosts.
	MovingUntil time.Time
}

// Portable reports whether the sandbox can come back on another host: it
// is paused and its last pause is durable in object storage.
func (b Sandbox) Portable() bool { return b.State == StatePaused && b.Durable != "" }

const sandboxCols = `s.id, s.project, s.host, s.host_epoch, s.generation, s.state, s.reason, s.template, s.parent,
	s.memory_mib, s.vcpus, s.created_at, s.updated_at, h.addr, h.state, h.epoch, s.durable_manifest, s.durable_at, s.moving_until`

func scanSandbox(r pgx.Row) (Sandbox, error) {
	var b Sandbox
	var at, moving *time.Time
	err := r.Scan(&b.ID, &b.Project, &b.Host, &b.HostEpoch, &b.Gen, &b.State, &b.Reason, &b.Template, &b.Parent,
		&b.MemoryMiB, &b.VCPUs, &b.Created, &b.Updated, &b.HostAddr, &b.HostState, &b.HostEpochOfHostNow, &b.Durable, &at, &moving)
	if at != nil {
		b.DurableAt = *at
	}
	if moving != nil {
		b.MovingUntil = *moving
	}
	return b, err
}

// Need is what a placement asks for: Count sandboxes of MemoryMiB and
// VCPUs each.
type Need struct {
	Project          string
	Count            int
	MemoryMiB, VCPUs int64
	Template, Parent string
}

// Reservation is a placement's result: the host and the placeholder rows
// that hold its room until Commit names them (or Unreserve frees them).
type Reservation struct {
	Host         Host
	Placeholders []string
}

// Reserve places n on the first of candidates (in order) that has room,
// in one transaction: the project's quota is checked under a lock of its
// row, and the host's room taken with a conditional UPDATE (a host can
// never be given more than it admits, however many replicas place at
// once). It fails with ErrQuota or ErrNoCapacity, naming the limit.
func (s *Store) Reserve(ctx context.Context, n Need, candidates []string) (Reservation, error) {
	var res Reservation
	n.Count = max(n.Count, 1)
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := checkQuota(ctx, tx, n); err != nil {
			return err
		}
		for _, name := range candidates {
			h, err := scanHost(tx.QueryRow(ctx, `UPDATE hosts SET used_mem_mib = used_mem_mib + $2, used_vcpus = used_vcpus + $3,
				used_sandboxes = used_sandboxes + $4
				WHERE name = $1 AND state = 'live' AND admin = 'active' AND lease_until > now()
				AND used_mem_mib + $2 <= mem_mib AND used_vcpus + $3 <= vcpus
				AND (max_sandboxes = 0 OR used_sandboxes + $4 <= max_sandboxes)
				RETURNING `+hostCols, name, n.MemoryMiB*int64(n.Count), n.VCPUs*int64(n.Count), n.Count))
			if err == pgx.ErrNoRows {
				continue
			}
			if err != nil {
				return err
			}
			res.Host = h
			for range n.Count {
				id := "placing-" + randHex(8)
				if _, err := tx.Exec(ctx, `INSERT INTO sandboxes (id, project, host, host_epoch, state, template, parent, memory_mib, vcpus)
					VALUES ($1, $2, $3, $4, 'placing', $5, $6, $7, $8)`, id, n.Project, h.Name, h.Epoch, n.Template, n.Parent, n.MemoryMiB, n.VCPUs); err != nil {
					return err
				}
				res.Placeholders = append(res.Placeholders, id)
			}
			return nil
		}
		return fmt.Errorf("%w: %d sandbox(es) of %d MiB and %d vCPUs fit none of %d candidate host(s) (memory, vCPUs or max sandboxes per host)",
			ErrNoCapacity, n.Count, n.MemoryMiB, n.VCPUs, len(candidates))
	})
	return res, err
}

// checkQuota refuses n when its project's quota would be passed.
func checkQuota(ctx context.Context, tx pgx.Tx, n Need) error {
	var maxSb, maxMem, maxCPU int64
	err := tx.QueryRow(ctx, `SELECT max_sandboxes, max_memory_mib, max_vcpus FROM projects WHERE name = $1 FOR UPDATE`, n.Project).
		Scan(&maxSb, &maxMem, &maxCPU)
	if err == pgx.ErrNoRows {
		return fmt.Errorf("%w: project %s", ErrNotFound, n.Project)
	}
	if err != nil || maxSb+maxMem+maxCPU == 0 {
		return err
	}
	var sb, mem, cpu int64
	if err := tx.QueryRow(ctx, `SELECT count(*), COALESCE(sum(memory_mib) FILTER (WHERE state <> 'paused'), 0),
		COALESCE(sum(vcpus) FILTER (WHERE state <> 'paused'), 0) FROM sandboxes WHERE project = $1 AND state <> 'lost'`, n.Project).
		Scan(&sb, &mem, &cpu); err != nil {
		return err
	}
	c := int64(n.Count)
	switch {
	case maxSb > 0 && sb+c > maxSb:
		return fmt.Errorf("%w: project %s: quota sandboxes is %d (in use %d, asked %d)", ErrQuota, n.Project, maxSb, sb, c)
	case maxMem > 0 && mem+c*n.MemoryMiB > maxMem:
		return fmt.Errorf("%w: project %s: quota memory_mib is %d (in use %d, asked %d)", ErrQuota, n.Project, maxMem, mem, c*n.MemoryMiB)
	case maxCPU > 0 && cpu+c*n.VCPUs > maxCPU:
		return fmt.Errorf("%w: project %s: quota vcpus is %d (in use %d, asked %d)", ErrQuota, n.Project, maxCPU, cpu, c*n.VCPUs)
	}
	return nil
}

// Commit gives a placeholder the id of the sandbox its host made.
func (s *Store) Commit(ctx context.Context, placeholder, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET id = $2, state = 'running', updated_at = now() WHERE id = $1 AND state = 'placing'`, placeholder, id)
	if err != nil {
		return fmt.Errorf("fleet store: commit %s: %w", id, wrap(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: placement %s (its host's lease lapsed meanwhile?)", ErrNotFound, placeholder)
	}
	return nil
}

// Unreserve frees placeholders that never became sandboxes.
func (s *Store) Unreserve(ctx context.Context, placeholders []string) error {
	return s.deleteRows(ctx, `state = 'placing' AND id = ANY($1)`, placeholders)
}

// Delete removes a sandbox's row and frees its room on its host.
func (s *Store) Delete(ctx context.Context, id string) error {
	return s.deleteRows(ctx, `id = $1`, id)
}

func (s *Store) deleteRows(ctx context.Context, where string, arg any) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM sandboxes WHERE `+where+` RETURNING host`, arg)
		if err != nil {
			return err
		}
		hosts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		done := map[string]bool{}
		for _, h := range hosts {
			if !done[h] {
				done[h] = true
				if _, err := tx.Exec(ctx, recount, h); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Get returns one sandbox's row.
func (s *Store) Get(ctx context.Context, id string) (Sandbox, error) {
	b, err := scanSandbox(s.pool.QueryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes s JOIN hosts h ON h.name = s.host WHERE s.id = $1`, id))
	if err != nil {
		return Sandbox{}, fmt.Errorf("fleet store: sandbox %s: %w", id, wrap(err))
	}
	return b, nil
}

// List returns the sandboxes of project ("" is every project's), placing
// ones left out.
func (s *Store) List(ctx context.Context, project string) ([]Sandbox, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sandboxCols+` FROM sandboxes s JOIN hosts h ON h.name = s.host
		WHERE s.state <> 'placing' AND ($1 = '' OR s.project = $1) ORDER BY s.created_at, s.id`, project)
	if err != nil {
		return nil, fmt.Errorf("fleet store: list sandboxes: %w", wrap(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Sandbox, error) { return scanSandbox(r) })
	return out, wrap(err)
}

// SetState records a pause or resume that the sandbox's host acknowledged;
// a lost sandbox stays lost.
func (s *Store) SetState(ctx context.Context, id, state string) error {
	_, err := s.pool.Exec(ctx, `UPDATE sandboxes SET state = $2, generation = generation + 1, updated_at = now()
		WHERE id = $1 AND state IN ('running', 'paused')`, id, state)
	return wrap(err)
}

// SetDurable records that sandboxID's snapshot manifest is durable in
// object storage since at (a host reports it after a durable pause or a
// checkpoint). An older report than the recorded one changes nothing, so
// reports that cross keep the newest; a sandbox without a row (deleted
// meanwhile) is ErrNotFound.
func (s *Store) SetDurable(ctx context.Context, sandboxID, manifest string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET durable_manifest = $2, durable_at = $3, updated_at = now()
		WHERE id = $1 AND (durable_at IS NULL OR durable_at <= $3)`, sandboxID, manifest, at)
	if err != nil {
		return fmt.Errorf("fleet store: durable %s: %w", sandboxID, wrap(err))
	}
	if tag.RowsAffected() == 0 {
		var one int
		if err := s.pool.QueryRow(ctx, `SELECT 1 FROM sandboxes WHERE id = $1`, sandboxID).Scan(&one); err != nil {
			return fmt.Errorf("fleet store: durable %s: %w", sandboxID, wrap(err))
		}
	}
	return nil
}

// Move re-homes sandbox id, if its row is still at generation gen, to
// the first of candidates that has room for it (checked as Reserve does),
// in that host's current epoch, with state (StateRunning or StatePaused):
// the row's host, epoch and state change and its generation goes up in
// one transaction, and both hosts' counters are recounted. A row that
// changed meanwhile is ErrFenced; no room is ErrNoCapacity.
func (s *Store) Move(ctx context.Context, id string, gen int64, candidates []string, state string) (Host, error) {
	return s.move(ctx, id, gen, candidates, state, `AND admin = 'active' AND used_mem_mib + $2 <= mem_mib AND used_vcpus + $3 <= vcpus
		AND (max_sandboxes = 0 OR used_sandboxes + 1 <= max_sandboxes)`)
}

// MoveBack is Move to host whatever its room or admin state, if it is
// live: a migrate that failed puts the sandbox back where it was (the
// room it leaves is its own).
func (s *Store) MoveBack(ctx context.Context, id string, gen int64, host, state string) (Host, error) {
	return s.move(ctx, id, gen, []string{host}, state, `AND $2::bigint >= 0 AND $3::bigint >= 0`)
}

func (s *Store) move(ctx context.Context, id string, gen int64, candidates []string, state, room string) (Host, error) {
	var to Host
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var from string
		var mem, cpu int64
		err := tx.QueryRow(ctx, `SELECT host, memory_mib, vcpus FROM sandboxes WHERE id = $1 AND generation = $2
			AND state IN ('running', 'paused', 'lost') FOR UPDATE`, id, gen).Scan(&from, &mem, &cpu)
		if err == pgx.ErrNoRows {
			return fmt.Errorf("%w: sandbox %s changed (generation %d is not its own)", ErrFenced, id, gen)
		}
		if err != nil {
			return err
		}
		for _, name := range candidates {
			if name == from {
				continue
			}
			h, err := scanHost(tx.QueryRow(ctx, `SELECT `+hostCols+` FROM hosts WHERE name = $1 AND state = 'live'
				AND lease_until > now() `+room+` FOR UPDATE`, name, mem, cpu))
			if err == pgx.ErrNoRows {
				continue
			}
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE sandboxes SET host = $2, host_epoch = $3, state = $4, reason = '',
				generation = generation + 1, updated_at = now() WHERE id = $1`, id, h.Name, h.Epoch, state); err != nil {
				return err
			}
			for _, n := range []string{from, h.Name} {
				if _, err := tx.Exec(ctx, recount, n); err != nil {
					return err
				}
			}
			to = h
			return nil
		}
		return fmt.Errorf("%w: sandbox %s (%d MiB, %d vCPUs) fits none of %d other host(s)", ErrNoCapacity, id, mem, cpu, len(candidates))
	})
	if err != nil {
		return Host{}, fmt.Errorf("fleet store: move %s: %w", id, err)
	}
	return to, nil
}

// SetMoving marks sandbox id as being moved until until (a migrate holds
// it), if no other move holds it now; false means one does. A zero until
// clears the mark.
func (s *Store) SetMoving(ctx context.Context, id string, until time.Time) (bool, error) {
	if until.IsZero() {
		_, err := s.pool.Exec(ctx, `UPDATE sandboxes SET moving_until = NULL WHERE id = $1`, id)
		return true, wrap(err)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET moving_until = $2 WHERE id = $1
		AND (moving_until IS NULL OR moving_until < now())`, id, until)
	if err != nil {
		return false, fmt.Errorf("fleet store: moving %s: %w", id, wrap(err))
	}
	return tag.RowsAffected() == 1, nil
}

// OnHost lists the sandboxes on host that are not lost nor placing.
func (s *Store) OnHost(ctx context.Context, host string) ([]Sandbox, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sandboxCols+` FROM sandboxes s JOIN hosts h ON h.name = s.host
		WHERE s.host = $1 AND s.state IN ('running', 'paused') ORDER BY s.created_at, s.id`, host)
	if err != nil {
		return nil, fmt.Errorf("fleet store: sandboxes of %s: %w", host, wrap(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Sandbox, error) { return scanSandbox(r) })
	return out, wrap(err)
}

// Forget drops the rows of sandboxes that their host, in epoch, reports it
// no longer has (a timeout deleted them), when they were placed before
// before. Nothing is written if epoch is not the host's.
func (s *Store) Forget(ctx context.Context, host string, epoch int64, ids []string, before time.Time) (int, error) {
	var n int
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var cur int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM hosts WHERE name = $1 FOR UPDATE`, host).Scan(&cur); err != nil {
			return err
		}
		if cur != epoch {
			return fmt.Errorf("%w: host %s epoch %d (now %d)", ErrFenced, host, epoch, cur)
		}
		// A durable paused sandbox the host lacks is not gone: it is in
		// object storage, and the host imports it on its next resume.
		tag, err := tx.Exec(ctx, `DELETE FROM sandboxes WHERE host = $1 AND id = ANY($2) AND state IN ('running', 'paused')
			AND created_at < $3 AND NOT (state = 'paused' AND durable_manifest <> '')`, host, ids, before)
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		_, err = tx.Exec(ctx, recount, host)
		return err
	})
	return n, err
}

// Owned lists the ids of the sandboxes that host owns in epoch (every row
// of it that is neither lost nor still placing).
func (s *Store) Owned(ctx context.Context, host string, epoch int64) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM sandboxes WHERE host = $1 AND host_epoch = $2 AND state IN ('running', 'paused')`, host, epoch)
	if err != nil {
		return nil, wrap(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, wrap(err)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
