package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// ChunkRefs counts the snapshot store's chunk references in the fleet's
// database: it is snapshot/chunks' Refs. A digest counts once per
// manifest, however often the manifest lists it or Acquire is called.
type ChunkRefs struct{ s *Store }

// ChunkRefs returns the store's chunk reference counts.
func (s *Store) ChunkRefs() *ChunkRefs { return &ChunkRefs{s: s} }

// Acquire adds manifest's references to digests. A snapshot's writer
// calls it before it asks the bucket whether a chunk is there: a chunk
// the collector is deleting makes Acquire wait for that delete to commit,
// and then the writer finds the object gone and uploads it again.
// Rows are locked in digest order, so concurrent calls do not deadlock.
func (r *ChunkRefs) Acquire(ctx context.Context, manifest string, digests []string) error {
	ds := slices.Clone(digests)
	slices.Sort(ds)
	ds = slices.Compact(ds)
	if len(ds) == 0 {
		return nil
	}
	return r.s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			INSERT INTO chunk_refs (manifest, digest) SELECT $1, d FROM unnest($2::text[]) AS d ORDER BY d
			ON CONFLICT DO NOTHING RETURNING digest`, manifest, ds)
		if err != nil {
			return err
		}
		added, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(added) == 0 {
			return nil
		}
		slices.Sort(added)
		_, err = tx.Exec(ctx, `
			INSERT INTO chunks (digest, refs) SELECT d, 1 FROM unnest($1::text[]) AS d ORDER BY d
			ON CONFLICT (digest) DO UPDATE SET refs = chunks.refs + 1`, added)
		return err
	})
}

// Release drops all of manifest's references (none is not an error); a
// chunk left with none starts its grace period.
func (r *ChunkRefs) Release(ctx context.Context, manifest string) error {
	return r.s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM chunk_refs WHERE manifest = $1 RETURNING digest`, manifest)
		if err != nil {
			return err
		}
		gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(gone) == 0 {
			return err
		}
		slices.Sort(gone)
		if _, err := tx.Exec(ctx, `SELECT 1 FROM chunks WHERE digest = ANY($1) ORDER BY digest FOR UPDATE`, gone); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			UPDATE chunks SET refs = refs - 1, idle_since = CASE WHEN refs = 1 THEN now() ELSE idle_since END
			WHERE digest = ANY($1) AND refs > 0`, gone)
		return err
	})
}

// Refcount is digest's reference count (0 when it has no row).
func (r *ChunkRefs) Refcount(ctx context.Context, digest string) (int, error) {
	var n int
	err := r.s.pool.QueryRow(ctx, `SELECT refs FROM chunks WHERE digest = $1`, digest).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return n, wrap(err)
}

// collectBatch bounds how many candidates one query of CollectChunks reads.
const collectBatch = 500

// CollectChunks deletes the chunks that no manifest has referenced for
// longer than grace and returns how many it deleted. Each is deleted under
// its row's lock, the object first (del, which must treat an absent
// object as deleted) and then the row, so a concurrent Acquire either
// waits for the delete (and its writer re-uploads) or is seen (the chunk
// is kept). It stops at the first error of del, keeping that row.
func (s *Store) CollectChunks(ctx context.Context, grace time.Duration, del func(ctx context.Context, digest string) error) (int, error) {
	n := 0
	after := ""
	for {
		rows, err := s.pool.Query(ctx, `
			SELECT digest FROM chunks WHERE refs = 0 AND idle_since < now() - make_interval(secs => $1) AND digest > $2
			ORDER BY digest LIMIT $3`, grace.Seconds(), after, collectBatch)
		if err != nil {
			return n, wrap(err)
		}
		cands, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return n, wrap(err)
		}
		for _, d := range cands {
			ok, err := s.collectChunk(ctx, d, grace, del)
			if err != nil {
				return n, err
			}
			if ok {
				n++
			}
		}
		if len(cands) < collectBatch {
			return n, nil
		}
		after = cands[len(cands)-1]
	}
}

// collectChunk deletes chunk d if it is still unreferenced past grace
// once its row is locked (a row another transaction holds is skipped:
// an Acquire is taking it).
func (s *Store) collectChunk(ctx context.Context, d string, grace time.Duration, del func(context.Context, string) error) (bool, error) {
	deleted := false
	var delErr error // the bucket's, not the database's: not wrapped as ErrUnavailable
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `
			SELECT 1 FROM chunks WHERE digest = $1 AND refs = 0 AND idle_since < now() - make_interval(secs => $2)
			FOR UPDATE SKIP LOCKED`, d, grace.Seconds()).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := del(ctx, d); err != nil {
			delErr = fmt.Errorf("fleet store: collect chunk %s: %w", d, err)
			return delErr
		}
		if _, err := tx.Exec(ctx, `DELETE FROM chunks WHERE digest = $1`, d); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	if delErr != nil {
		return false, delErr
	}
	return deleted, err
}
