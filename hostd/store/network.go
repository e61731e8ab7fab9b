package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// networkSchema is migration 3 (after the snapshots).
const networkSchema = `CREATE TABLE sandbox_networks (
		sandbox_id TEXT PRIMARY KEY,
		policy     TEXT NOT NULL
	);
	CREATE TABLE network_events (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		sandbox_id TEXT NOT NULL,
		time       INTEGER NOT NULL,
		kind       TEXT NOT NULL,
		host       TEXT NOT NULL DEFAULT '',
		port       INTEGER NOT NULL DEFAULT 0,
		method     TEXT NOT NULL DEFAULT '',
		path       TEXT NOT NULL DEFAULT '',
		bytes_out  INTEGER NOT NULL DEFAULT 0,
		bytes_in   INTEGER NOT NULL DEFAULT 0,
		allowed    INTEGER NOT NULL,
		rule       TEXT NOT NULL DEFAULT '',
		status     INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX network_events_sandbox ON network_events (sandbox_id, id);
	CREATE TABLE secrets (
		name       TEXT PRIMARY KEY,
		sealed     BLOB NOT NULL,
		created_at INTEGER NOT NULL
	);`

// PutNetworkPolicy stores a sandbox's policy document (JSON).
func (s *Store) PutNetworkPolicy(ctx context.Context, id string, policy []byte) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sandbox_networks (sandbox_id, policy) VALUES (?, ?)
		ON CONFLICT (sandbox_id) DO UPDATE SET policy = excluded.policy`, id, string(policy))
	if err != nil {
		return fmt.Errorf("store: put network policy: %w", err)
	}
	return nil
}

// GetNetworkPolicy returns a sandbox's policy document.
func (s *Store) GetNetworkPolicy(ctx context.Context, id string) ([]byte, error) {
	var p string
	err := s.db.QueryRowContext(ctx, `SELECT policy FROM sandbox_networks WHERE sandbox_id = ?`, id).Scan(&p)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: network policy of %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get network policy: %w", err)
	}
	return []byte(p), nil
}

// DeleteNetworkPolicy removes a sandbox's policy (its events stay).
func (s *Store) DeleteNetworkPolicy(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM sandbox_networks WHERE sandbox_id = ?`, id)
	return err
}

// SecretMeta describes a stored secret (never its value).
type SecretMeta struct {
	Name      string
	CreatedAt time.Time
}

// PutSecret stores a sealed secret, replacing one of the same name.
func (s *Store) PutSecret(ctx context.Context, name string, sealed []byte) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO secrets (name, sealed, created_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET sealed = excluded.sealed, created_at = excluded.created_at`,
		name, sealed, time.Now().UnixNano())
	if err != nil {
		return fmt.Errorf("store: put secret: %w", err)
	}
	return nil
}

// GetSecret returns a sealed secret.
func (s *Store) GetSecret(ctx context.Context, name string) ([]byte, error) {
	var b []byte
	err := s.db.QueryRowContext(ctx, `SELECT sealed FROM secrets WHERE name = ?`, name).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: secret %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get secret: %w", err)
	}
	return b, nil
}

// ListSecrets returns every secret's name, sorted.
func (s *Store) ListSecrets(ctx context.Context) ([]SecretMeta, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, created_at FROM secrets ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list secrets: %w", err)
	}
	defer rows.Close()
	var out []SecretMeta
	for rows.Next() {
		var m SecretMeta
		var t int64
		if err := rows.Scan(&m.Name, &t); err != nil {
			return nil, err
		}
		m.CreatedAt = time.Unix(0, t).UTC()
		out = append(out, m)
	}
	return out, rows.Err()
}

// DeleteSecret removes a secret; ErrNotFound if there is none.
func (s *Store) DeleteSecret(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("store: delete secret: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: secret %s", ErrNotFound, name)
	}
	return nil
}
