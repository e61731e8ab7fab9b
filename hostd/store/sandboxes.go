package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Sandbox is one row of the sandboxes table.
type Sandbox struct {
	ID, State                  string
	VCPUs, MemoryMiB, TimeoutS int
	Env, Metadata              map[string]string
	CreatedAt                  time.Time
	Error                      string
	VMPID                      int
	// Dir is the sandbox's directory under the data directory.
	Dir string
}

const sandboxColumns = `id, state, vcpus, memory_mib, env, timeout_s, metadata, created_at, error, vm_pid, dir`

// PutSandbox inserts sb or replaces the row with its ID.
func (s *Store) PutSandbox(ctx context.Context, sb Sandbox) error {
	env, err := marshalMap(sb.Env)
	if err != nil {
		return fmt.Errorf("store: sandbox %s env: %w", sb.ID, err)
	}
	meta, err := marshalMap(sb.Metadata)
	if err != nil {
		return fmt.Errorf("store: sandbox %s metadata: %w", sb.ID, err)
	}
	_, err = s.db.ExecContext(ctx,
		`INSERT OR REPLACE INTO sandboxes (`+sandboxColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sb.ID, sb.State, sb.VCPUs, sb.MemoryMiB, env, sb.TimeoutS, meta,
		sb.CreatedAt.UnixNano(), sb.Error, sb.VMPID, sb.Dir)
	if err != nil {
		return fmt.Errorf("store: put sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// GetSandbox returns the sandbox with id, or an error wrapping ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("store: sandbox %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("store: get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// ListSandboxes returns every sandbox, oldest first.
func (s *Store) ListSandboxes(ctx context.Context) ([]Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list sandboxes: %w", err)
	}
	return out, nil
}

// SetSandboxState updates a sandbox's state, error message and VMM pid. It
// returns an error wrapping ErrNotFound if there is no such sandbox.
func (s *Store) SetSandboxState(ctx context.Context, id, state, errMsg string, vmPID int) error {
	res, err := s.db.ExecContext(ctx,
		`UPDATE sandboxes SET state = ?, error = ?, vm_pid = ? WHERE id = ?`, state, errMsg, vmPID, id)
	if err != nil {
		return fmt.Errorf("store: set sandbox %s state: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: set sandbox %s state: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("store: sandbox %s: %w", id, ErrNotFound)
	}
	return nil
}

// DeleteSandbox deletes a sandbox's row. Deleting a missing row is not an
// error, so cleanup can be retried.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("store: delete sandbox %s: %w", id, err)
	}
	return nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

func scanSandbox(sc scanner) (Sandbox, error) {
	var (
		sb        Sandbox
		env, meta string
		created   int64
	)
	err := sc.Scan(&sb.ID, &sb.State, &sb.VCPUs, &sb.MemoryMiB, &env, &sb.TimeoutS, &meta,
		&created, &sb.Error, &sb.VMPID, &sb.Dir)
	if err != nil {
		return Sandbox{}, err
	}
	sb.CreatedAt = time.Unix(0, created).UTC()
	if err := json.Unmarshal([]byte(env), &sb.Env); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s env: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(meta), &sb.Metadata); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s metadata: %w", sb.ID, err)
	}
	return sb, nil
}

func marshalMap(m map[string]string) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}
