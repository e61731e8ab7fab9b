package store

import (
	"context"
	"fmt"
	"time"
)

// AddAPIKey stores an API key's hash under a name, as an admin key of the
// default project whose id is made of the hash. Adding a hash that is
// already stored does nothing (the first name is kept).
func (s *Store) AddAPIKey(ctx context.Context, name, hash string) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO api_keys (hash, name, created_at, id) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		hash, name, time.Now().UnixNano(), "key_"+hash[:min(16, len(hash))])
	if err != nil {
		return fmt.Errorf("store: add api key %q: %w", name, err)
	}
	return nil
}

// HasAPIKey reports whether hash is the hash of a stored key that is
// neither revoked nor expired.
func (s *Store) HasAPIKey(ctx context.Context, hash string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM api_keys WHERE hash = ? AND revoked_at = 0 AND (expires_at = 0 OR expires_at > ?)`,
		hash, time.Now().UnixNano()).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: look up api key: %w", err)
	}
	return n > 0, nil
}
