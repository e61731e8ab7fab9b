package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/snapshot"
)

// SandboxVM is the part of a sandbox's state that snapshots change: which
// snapshot its disk overlays, the overlay file, and where its memory was
// saved while it is paused.
type SandboxVM struct {
	ID         string
	SnapshotID string
	Overlay    string
	PauseDir   string
	// Cwd is the default working directory and User the default user of
	// execs (from a template).
	Cwd, User string
}

// PutSandboxVM inserts or replaces a sandbox's VM state.
func (s *Store) PutSandboxVM(ctx context.Context, v SandboxVM) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO sandbox_vm (id, snapshot_id, overlay, pause_dir, cwd, exec_user) VALUES (?, ?, ?, ?, ?, ?)`,
		v.ID, v.SnapshotID, v.Overlay, v.PauseDir, v.Cwd, v.User)
	if err != nil {
		return fmt.Errorf("store: put sandbox vm %s: %w", v.ID, err)
	}
	return nil
}

// GetSandboxVM returns a sandbox's VM state (zero values but the ID when
// none was stored).
func (s *Store) GetSandboxVM(ctx context.Context, id string) (SandboxVM, error) {
	v := SandboxVM{ID: id}
	err := s.db.QueryRowContext(ctx, `SELECT snapshot_id, overlay, pause_dir, cwd, exec_user FROM sandbox_vm WHERE id = ?`, id).
		Scan(&v.SnapshotID, &v.Overlay, &v.PauseDir, &v.Cwd, &v.User)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("store: get sandbox vm %s: %w", id, err)
	}
	return v, nil
}

// DeleteSandboxVM removes a sandbox's VM state.
func (s *Store) DeleteSandboxVM(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM sandbox_vm WHERE id = ?`, id)
	return err
}

// Snapshot is one row of the snapshots table: the snapshot engine's record.
type Snapshot = snapshot.Record

const snapshotColumns = `id, kind, sandbox_id, parent_id, dir, vcpus, memory_mib, env, cwd, backend, size_bytes, cache_key, created_at, exec_user`

// PutSnapshot inserts or replaces a snapshot.
func (s *Store) PutSnapshot(ctx context.Context, sn Snapshot) error {
	env, err := marshalMap(sn.Env)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT OR REPLACE INTO snapshots (`+snapshotColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sn.ID, sn.Kind, sn.SandboxID, sn.ParentID, sn.Dir, sn.VCPUs, sn.MemoryMiB, env, sn.Cwd, sn.Backend,
		sn.SizeBytes, sn.CacheKey, sn.CreatedAt.UnixNano(), sn.User)
	if err != nil {
		return fmt.Errorf("store: put snapshot %s: %w", sn.ID, err)
	}
	return nil
}

// GetSnapshot returns a snapshot or an error wrapping ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	sn, err := scanSnapshot(s.db.QueryRowContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return sn, fmt.Errorf("store: snapshot %s: %w", id, ErrNotFound)
	}
	return sn, err
}

// FindSnapshotByKey returns the newest snapshot with a cache key.
func (s *Store) FindSnapshotByKey(ctx context.Context, key string) (Snapshot, error) {
	sn, err := scanSnapshot(s.db.QueryRowContext(ctx,
		`SELECT `+snapshotColumns+` FROM snapshots WHERE cache_key = ? ORDER BY created_at DESC LIMIT 1`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return sn, fmt.Errorf("store: snapshot with key %s: %w", key, ErrNotFound)
	}
	return sn, err
}

// ListSnapshots returns every snapshot, oldest first.
func (s *Store) ListSnapshots(ctx context.Context) ([]Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Snapshot
	for rows.Next() {
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sn)
	}
	return out, rows.Err()
}

// DeleteSnapshot removes a snapshot's row.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	return err
}

// SnapshotUsers lists what refers to snapshot id: sandboxes whose disk
// overlays it, child snapshots and templates.
func (s *Store) SnapshotUsers(ctx context.Context, id string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT 'sandbox ' || id FROM sandbox_vm WHERE snapshot_id = ?
		UNION ALL SELECT 'snapshot ' || id FROM snapshots WHERE parent_id = ?
		UNION ALL SELECT 'template ' || name FROM templates WHERE snapshot_id = ?`, id, id, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

func scanSnapshot(sc scanner) (Snapshot, error) {
	var (
		sn      Snapshot
		env     string
		created int64
	)
	err := sc.Scan(&sn.ID, &sn.Kind, &sn.SandboxID, &sn.ParentID, &sn.Dir, &sn.VCPUs, &sn.MemoryMiB, &env,
		&sn.Cwd, &sn.Backend, &sn.SizeBytes, &sn.CacheKey, &created, &sn.User)
	if err != nil {
		return sn, err
	}
	sn.CreatedAt = time.Unix(0, created).UTC()
	if err := json.Unmarshal([]byte(env), &sn.Env); err != nil {
		return sn, fmt.Errorf("snapshot %s env: %w", sn.ID, err)
	}
	return sn, nil
}

// Template names a snapshot that sandboxes start from.
type Template struct {
	Name       string
	SnapshotID string
	PoolSize   int
	CreatedAt  time.Time
}

// PutTemplate inserts or replaces a template.
func (s *Store) PutTemplate(ctx context.Context, t Template) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO templates (name, snapshot_id, pool_size, created_at) VALUES (?, ?, ?, ?)`,
		t.Name, t.SnapshotID, t.PoolSize, t.CreatedAt.UnixNano())
	return err
}

// GetTemplate returns a template or an error wrapping ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, name string) (Template, error) {
	t := Template{Name: name}
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT snapshot_id, pool_size, created_at FROM templates WHERE name = ?`, name).
		Scan(&t.SnapshotID, &t.PoolSize, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("store: template %s: %w", name, ErrNotFound)
	}
	t.CreatedAt = time.Unix(0, created).UTC()
	return t, err
}

// ListTemplates returns every template by name.
func (s *Store) ListTemplates(ctx context.Context) ([]Template, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, snapshot_id, pool_size, created_at FROM templates ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Template
	for rows.Next() {
		var t Template
		var created int64
		if err := rows.Scan(&t.Name, &t.SnapshotID, &t.PoolSize, &created); err != nil {
			return nil, err
		}
		t.CreatedAt = time.Unix(0, created).UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}

// DeleteTemplate removes a template.
func (s *Store) DeleteTemplate(ctx context.Context, name string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM templates WHERE name = ?`, name)
	return err
}
