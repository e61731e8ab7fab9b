package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrExists is wrapped by inserts of a row whose key is taken.
var ErrExists = errors.New("store: already exists")

// DefaultProject owns everything that a store made before projects holds,
// and today's keys are its admins.
const DefaultProject = "default"

// Roles of API keys.
const (
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// Kinds of owned resources (the owners table's kind).
const (
	KindSandbox  = "sandbox"
	KindSnapshot = "snapshot"
	KindTemplate = "template"
	KindSecret   = "secret"
)

// tenancySchema is migration 8: projects, keys with an id, prefix, project,
// role, expiry and revocation, and the owner of each sandbox, snapshot,
// template and secret. What the store held before belongs to the default
// project, and its keys become the default project's admins (they could do
// everything before); the file and env keys are marked as bootstrap keys.
const tenancySchema = `CREATE TABLE projects (
	name       TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL
);
INSERT INTO projects (name, created_at) VALUES ('default', CAST(strftime('%s', 'now') AS INTEGER) * 1000000000);
ALTER TABLE api_keys ADD COLUMN id TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN prefix TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN revoked_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN bootstrap INTEGER NOT NULL DEFAULT 0;
UPDATE api_keys SET id = 'key_' || substr(hash, 1, 16), bootstrap = (name IN ('api-key', 'env'));
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);
CREATE TABLE owners (
	kind    TEXT NOT NULL,
	id      TEXT NOT NULL,
	project TEXT NOT NULL,
	shared  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (kind, id)
);
INSERT INTO owners (kind, id, project) SELECT 'sandbox', id, 'default' FROM sandboxes;
INSERT INTO owners (kind, id, project) SELECT 'snapshot', id, 'default' FROM snapshots;
INSERT INTO owners (kind, id, project) SELECT 'template', name, 'default' FROM templates;
INSERT INTO owners (kind, id, project) SELECT 'secret', name, 'default' FROM secrets;`

// Project is one row of the projects table.
type Project struct {
	Name      string
	CreatedAt time.Time
}

// APIKey is one API key's record; the key itself is never stored, only its
// hash (not in this struct) and Prefix, a few of its first characters kept
// in clear to recognise a leaked key.
type APIKey struct {
	ID, Name, Prefix string
	Project, Role    string
	CreatedAt        time.Time
	// LastUsedAt, ExpiresAt and RevokedAt are zero when never, none and not.
	LastUsedAt, ExpiresAt, RevokedAt time.Time
	// Bootstrap marks the key of the data dir's key file or of the env:
	// a new one at start revokes the previous.
	Bootstrap bool
}

// Valid reports whether k may be used at now.
func (k APIKey) Valid(now time.Time) bool {
	return k.RevokedAt.IsZero() && (k.ExpiresAt.IsZero() || now.Before(k.ExpiresAt))
}

// Owner is the project a resource belongs to; Shared resources (templates)
// are readable by every project.
type Owner struct {
	Project string
	Shared  bool
}

// CreateProject adds a project, or fails wrapping ErrExists.
func (s *Store) CreateProject(ctx context.Context, name string) (Project, error) {
	p := Project{Name: name, CreatedAt: time.Now().UTC()}
	res, err := s.db.ExecContext(ctx, `INSERT INTO projects (name, created_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`,
		name, p.CreatedAt.UnixNano())
	if err != nil {
		return Project{}, fmt.Errorf("store: create project %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Project{}, fmt.Errorf("store: project %q: %w", name, ErrExists)
	}
	return p, nil
}

// GetProject returns the project name, or an error wrapping ErrNotFound.
func (s *Store) GetProject(ctx context.Context, name string) (Project, error) {
	p := Project{Name: name}
	var at int64
	err := s.db.QueryRowContext(ctx, `SELECT created_at FROM projects WHERE name = ?`, name).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("store: project %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("store: get project %q: %w", name, err)
	}
	p.CreatedAt = time.Unix(0, at).UTC()
	return p, nil
}

// ListProjects returns every project by name.
func (s *Store) ListProjects(ctx context.Context) ([]Project, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, created_at FROM projects ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list projects: %w", err)
	}
	defer rows.Close()
	var out []Project
	for rows.Next() {
		var p Project
		var at int64
		if err := rows.Scan(&p.Name, &at); err != nil {
			return nil, fmt.Errorf("store: list projects: %w", err)
		}
		p.CreatedAt = time.Unix(0, at).UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// SetOwner records the project of a resource, replacing any owner it had.
func (s *Store) SetOwner(ctx context.Context, kind, id string, o Owner) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO owners (kind, id, project, shared) VALUES (?, ?, ?, ?)`,
		kind, id, o.Project, o.Shared)
	if err != nil {
		return fmt.Errorf("store: set owner of %s %s: %w", kind, id, err)
	}
	return nil
}

// GetOwner returns the owner of a resource, or an error wrapping
// ErrNotFound when none is recorded.
func (s *Store) GetOwner(ctx context.Context, kind, id string) (Owner, error) {
	var o Owner
	err := s.db.QueryRowContext(ctx, `SELECT project, shared FROM owners WHERE kind = ? AND id = ?`, kind, id).Scan(&o.Project, &o.Shared)
	if errors.Is(err, sql.ErrNoRows) && kind == KindSnapshot {
		err = s.db.QueryRowContext(ctx, snapshotBySandboxOwner+` AND s.id = ?`, id).Scan(new(string), &o.Project)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return o, fmt.Errorf("store: owner of %s %s: %w", kind, id, ErrNotFound)
	}
	if err != nil {
		return o, fmt.Errorf("store: owner of %s %s: %w", kind, id, err)
	}
	return o, nil
}

// Owners returns the owner of every resource of kind that has one.
func (s *Store) Owners(ctx context.Context, kind string) (map[string]Owner, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, project, shared FROM owners WHERE kind = ?`, kind)
	if err != nil {
		return nil, fmt.Errorf("store: owners of %ss: %w", kind, err)
	}
	defer rows.Close()
	out := map[string]Owner{}
	for rows.Next() {
		var id string
		var o Owner
		if err := rows.Scan(&id, &o.Project, &o.Shared); err != nil {
			return nil, fmt.Errorf("store: owners of %ss: %w", kind, err)
		}
		out[id] = o
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if kind == KindSnapshot {
		return out, s.sandboxOwnedSnapshots(ctx, out)
	}
	return out, nil
}

// snapshotBySandboxOwner selects the snapshots with no owner of their own
// and the project of the sandbox each was taken from: a snapshot hostd
// made for a sandbox (a fork's, one cut short by a crash before its owner
// was written) is that sandbox's project's.
const snapshotBySandboxOwner = `SELECT s.id, o.project FROM snapshots s
	JOIN owners o ON o.kind = 'sandbox' AND o.id = s.sandbox_id
	WHERE NOT EXISTS (SELECT 1 FROM owners so WHERE so.kind = 'snapshot' AND so.id = s.id)`

// sandboxOwnedSnapshots adds to out the snapshots owned through their
// sandbox (snapshotBySandboxOwner).
func (s *Store) sandboxOwnedSnapshots(ctx context.Context, out map[string]Owner) error {
	rows, err := s.db.QueryContext(ctx, snapshotBySandboxOwner)
	if err != nil {
		return fmt.Errorf("store: owners of snapshots: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var o Owner
		if err := rows.Scan(&id, &o.Project); err != nil {
			return fmt.Errorf("store: owners of snapshots: %w", err)
		}
		out[id] = o
	}
	return rows.Err()
}

// DeleteOwner forgets the owner of a resource (deleting none is no error).
func (s *Store) DeleteOwner(ctx context.Context, kind, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM owners WHERE kind = ? AND id = ?`, kind, id); err != nil {
		return fmt.Errorf("store: delete owner of %s %s: %w", kind, id, err)
	}
	return nil
}
