package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

const apiKeyColumns = `id, name, prefix, project, role, created_at, last_used_at, expires_at, revoked_at, bootstrap`

// CreateAPIKey stores a key's record under its hash. A taken id or hash
// fails wrapping ErrExists; an unknown project wraps ErrNotFound.
func (s *Store) CreateAPIKey(ctx context.Context, k APIKey, hash string) error {
	if _, err := s.GetProject(ctx, k.Project); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (hash, `+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT DO NOTHING`,
		hash, k.ID, k.Name, k.Prefix, k.Project, k.Role, k.CreatedAt.UnixNano(), nanos(k.LastUsedAt), nanos(k.ExpiresAt), nanos(k.RevokedAt), k.Bootstrap)
	if err != nil {
		return fmt.Errorf("store: create api key %s: %w", k.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: api key %s: %w", k.ID, ErrExists)
	}
	return nil
}

// AddBootstrapKey stores the bootstrap key (an admin key of the default
// project) under hash unless it is stored, and revokes every other
// bootstrap key: a new key file or env key replaces the one before it.
// A revoked key stays revoked.
func (s *Store) AddBootstrapKey(ctx context.Context, k APIKey, hash string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: bootstrap key: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	k.Project, k.Role, k.Bootstrap = DefaultProject, RoleAdmin, true
	if _, err := tx.ExecContext(ctx, `INSERT INTO api_keys (hash, `+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, 0, 1)
		ON CONFLICT (hash) DO UPDATE SET bootstrap = 1`,
		hash, k.ID, k.Name, k.Prefix, k.Project, k.Role, k.CreatedAt.UnixNano()); err != nil {
		return fmt.Errorf("store: bootstrap key: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE bootstrap = 1 AND revoked_at = 0 AND hash != ?`,
		time.Now().UnixNano(), hash); err != nil {
		return fmt.Errorf("store: bootstrap key: %w", err)
	}
	return tx.Commit()
}

// APIKeyByHash returns the record of the key whose hash is hash, revoked or
// not, or an error wrapping ErrNotFound.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (APIKey, error) {
	k, err := scanAPIKey(s.db.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return k, fmt.Errorf("store: api key: %w", ErrNotFound)
	}
	if err != nil {
		return k, fmt.Errorf("store: look up api key: %w", err)
	}
	return k, nil
}

// GetAPIKey returns the record of key id, or an error wrapping ErrNotFound.
func (s *Store) GetAPIKey(ctx context.Context, id string) (APIKey, error) {
	k, err := scanAPIKey(s.db.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return k, fmt.Errorf("store: api key %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return k, fmt.Errorf("store: get api key %s: %w", id, err)
	}
	return k, nil
}

// ListAPIKeys returns the keys that are not revoked, of project ("" for
// every project), oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, project string) ([]APIKey, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys
		WHERE revoked_at = 0 AND (? = '' OR project = ?) ORDER BY created_at, id`, project, project)
	if err != nil {
		return nil, fmt.Errorf("store: list api keys: %w", err)
	}
	defer rows.Close()
	var out []APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list api keys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeAPIKey revokes key id at at, or fails wrapping ErrNotFound when no
// such key is live.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at = 0`, at.UnixNano(), id)
	if err != nil {
		return fmt.Errorf("store: revoke api key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: api key %s: %w", id, ErrNotFound)
	}
	return nil
}

// TouchAPIKey records that key id was used at at.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ? WHERE id = ?`, at.UnixNano(), id); err != nil {
		return fmt.Errorf("store: touch api key %s: %w", id, err)
	}
	return nil
}

func scanAPIKey(row interface{ Scan(...any) error }) (APIKey, error) {
	var k APIKey
	var created, used, expires, revoked int64
	err := row.Scan(&k.ID, &k.Name, &k.Prefix, &k.Project, &k.Role, &created, &used, &expires, &revoked, &k.Bootstrap)
	k.CreatedAt, k.LastUsedAt, k.ExpiresAt, k.RevokedAt = unixOrZero(created), unixOrZero(used), unixOrZero(expires), unixOrZero(revoked)
	return k, err
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func unixOrZero(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
