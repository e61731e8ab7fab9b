package store

import (
	"context"
	"fmt"
	"time"
)

// AddAPIKey stores an API key's hash under a name. Adding a hash that is
// already stored does nothing (the first name is kept).
func (s *Store) AddAPIKey(ctx context.Context, name, hash string) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO api_keys (hash, name, created_at) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING`,
		hash, name, time.Now().UnixNano())
	if err != nil {
		return fmt.Errorf("store: add api key %q: %w", name, err)
	}
	return nil
}

// HasAPIKey reports whether hash is a stored API key hash.
func (s *Store) HasAPIKey(ctx context.Context, hash string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM api_keys WHERE hash = ?`, hash).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: look up api key: %w", err)
	}
	return n > 0, nil
}
