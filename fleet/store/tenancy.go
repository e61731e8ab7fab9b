package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultProject is the project the migrations make; the fleet's first
// key is its admin.
const DefaultProject = "default"

// Roles of API keys.
const (
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// KeysChannel is the LISTEN/NOTIFY channel a key's revocation is announced
// on (its payload is the key's hash): every replica drops its cached copy.
const KeysChannel = "agentbox_keys"

// Project is one project and its quota (0: no bound).
type Project struct {
	Name                   string
	Created                time.Time
	MaxSandboxes           int
	MaxMemoryMiB, MaxVCPUs int64
}

// APIKey is a key's record; the key itself is never stored, only its
// SHA-256 (Hash) and, in clear, Prefix.
type APIKey struct {
	ID, Name, Prefix, Project, Role, Hash string
	Bootstrap                             bool
	Created                               time.Time
	Expires, Revoked, LastUsed            *time.Time
}

// Usable reports whether k may be used at now.
func (k APIKey) Usable(now time.Time) bool {
	return k.Revoked == nil && (k.Expires == nil || k.Expires.After(now))
}

// CreateProject adds a project.
func (s *Store) CreateProject(ctx context.Context, p Project) (Project, error) {
	err := s.pool.QueryRow(ctx, `INSERT INTO projects (name, max_sandboxes, max_memory_mib, max_vcpus) VALUES ($1, $2, $3, $4) RETURNING created_at`,
		p.Name, p.MaxSandboxes, p.MaxMemoryMiB, p.MaxVCPUs).Scan(&p.Created)
	if err != nil {
		return Project{}, fmt.Errorf("fleet store: project %s: %w", p.Name, wrap(err))
	}
	return p, nil
}

// SetQuota replaces a project's quota.
func (s *Store) SetQuota(ctx context.Context, p Project) error {
	tag, err := s.pool.Exec(ctx, `UPDATE projects SET max_sandboxes = $2, max_memory_mib = $3, max_vcpus = $4 WHERE name = $1`,
		p.Name, p.MaxSandboxes, p.MaxMemoryMiB, p.MaxVCPUs)
	if err == nil && tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: project %s", ErrNotFound, p.Name)
	}
	return wrap(err)
}

// GetProject returns one project.
func (s *Store) GetProject(ctx context.Context, name string) (Project, error) {
	var p Project
	err := s.pool.QueryRow(ctx, `SELECT name, created_at, max_sandboxes, max_memory_mib, max_vcpus FROM projects WHERE name = $1`, name).
		Scan(&p.Name, &p.Created, &p.MaxSandboxes, &p.MaxMemoryMiB, &p.MaxVCPUs)
	if err != nil {
		return Project{}, fmt.Errorf("fleet store: project %s: %w", name, wrap(err))
	}
	return p, nil
}

// ListProjects lists every project by name.
func (s *Store) ListProjects(ctx context.Context) ([]Project, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, created_at, max_sandboxes, max_memory_mib, max_vcpus FROM projects ORDER BY name`)
	if err != nil {
		return nil, wrap(err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Project, error) {
		var p Project
		return p, r.Scan(&p.Name, &p.Created, &p.MaxSandboxes, &p.MaxMemoryMiB, &p.MaxVCPUs)
	})
	return ps, wrap(err)
}

const keyCols = `id, name, prefix, project, role, hash, bootstrap, created_at, expires_at, revoked_at, last_used_at`

func scanKey(r pgx.Row) (APIKey, error) {
	var k APIKey
	err := r.Scan(&k.ID, &k.Name, &k.Prefix, &k.Project, &k.Role, &k.Hash, &k.Bootstrap, &k.Created, &k.Expires, &k.Revoked, &k.LastUsed)
	return k, err
}

// CreateKey stores a key's record (k.Hash set, k.Created filled in).
func (s *Store) CreateKey(ctx context.Context, k APIKey) (APIKey, error) {
	err := s.pool.QueryRow(ctx, `INSERT INTO api_keys (id, name, prefix, project, role, hash, bootstrap, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING created_at`,
		k.ID, k.Name, k.Prefix, k.Project, k.Role, k.Hash, k.Bootstrap, k.Expires).Scan(&k.Created)
	if err != nil {
		return APIKey{}, fmt.Errorf("fleet store: key %s: %w", k.Name, wrap(err))
	}
	return k, nil
}

// KeyByHash returns the record of the key with that hash.
func (s *Store) KeyByHash(ctx context.Context, hash string) (APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = $1`, hash))
	if err != nil {
		return APIKey{}, fmt.Errorf("fleet store: key: %w", wrap(err))
	}
	return k, nil
}

// GetKey returns a key's record by id.
func (s *Store) GetKey(ctx context.Context, id string) (APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE id = $1`, id))
	if err != nil {
		return APIKey{}, fmt.Errorf("fleet store: key %s: %w", id, wrap(err))
	}
	return k, nil
}

// ListKeys lists project's keys ("" is every project's), oldest first.
func (s *Store) ListKeys(ctx context.Context, project string) ([]APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyCols+` FROM api_keys WHERE $1 = '' OR project = $1 ORDER BY created_at, id`, project)
	if err != nil {
		return nil, wrap(err)
	}
	ks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) { return scanKey(r) })
	return ks, wrap(err)
}

// RevokeKey revokes a key and announces it on KeysChannel in the same
// transaction, so every replica hears of it once it is committed.
func (s *Store) RevokeKey(ctx context.Context, id string) (APIKey, error) {
	var k APIKey
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		k, err = scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 RETURNING `+keyCols, id))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, KeysChannel, k.Hash)
		return err
	})
	if err != nil {
		return APIKey{}, fmt.Errorf("fleet store: revoke key %s: %w", id, err)
	}
	return k, nil
}

// TouchKey records a key's last use.
func (s *Store) TouchKey(ctx context.Context, id string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE api_keys SET last_used_at = $2 WHERE id = $1`, id, at)
	return wrap(err)
}

// Listen calls fn with the payload of every notification on channel until
// ctx ends or the connection is lost (then it returns the error; the
// caller listens again and treats its caches as stale). ready, if set, is
// called once the LISTEN is in place.
func (s *Store) Listen(ctx context.Context, channel string, ready func(), fn func(payload string)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return wrap(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return wrap(err)
	}
	if ready != nil {
		ready()
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			// The connection's state is unknown after an interrupted wait.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
			return wrap(err)
		}
		fn(n.Payload)
	}
}
