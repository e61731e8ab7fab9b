package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// PutSandboxLimits stores a sandbox's limits, an opaque JSON-encodable
// value that the sandbox manager owns.
func (s *Store) PutSandboxLimits(ctx context.Context, id string, limits any) error {
	b, err := json.Marshal(limits)
	if err != nil {
		return fmt.Errorf("store: sandbox %s limits: %w", id, err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO sandbox_limits (id, limits) VALUES (?, ?)`, id, string(b)); err != nil {
		return fmt.Errorf("store: put sandbox %s limits: %w", id, err)
	}
	return nil
}

// GetSandboxLimits decodes a sandbox's limits into v; a sandbox without a
// row leaves v alone and returns an error wrapping ErrNotFound.
func (s *Store) GetSandboxLimits(ctx context.Context, id string, v any) error {
	var raw string
	err := s.db.QueryRowContext(ctx, `SELECT limits FROM sandbox_limits WHERE id = ?`, id).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("store: sandbox %s limits: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: get sandbox %s limits: %w", id, err)
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return fmt.Errorf("store: sandbox %s limits: %w", id, err)
	}
	return nil
}

// DeleteSandboxLimits deletes a sandbox's limits (missing is not an error).
func (s *Store) DeleteSandboxLimits(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sandbox_limits WHERE id = ?`, id); err != nil {
		return fmt.Errorf("store: delete sandbox %s limits: %w", id, err)
	}
	return nil
}
