package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// APIKeyName returns the name of the API key whose hash is hash, or an
// error wrapping ErrNotFound.
func (s *Store) APIKeyName(ctx context.Context, hash string) (string, error) {
	var name string
	err := s.db.QueryRowContext(ctx, `SELECT name FROM api_keys WHERE hash = ? AND revoked_at = 0 AND (expires_at = 0 OR expires_at > ?)`, hash, time.Now().UnixNano()).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("store: api key: %w", ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: look up api key: %w", err)
	}
	return name, nil
}
