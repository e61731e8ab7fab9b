package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Object is where a snapshot or a template lives and who owns it.
type Object struct {
	ID, Project, Host string
	// Sandbox is a snapshot's sandbox ("" for templates).
	Sandbox string
	Created time.Time
}

// objectTable names the two tables of objects and their key columns.
var objectTable = map[string]struct{ table, key string }{
	"snapshot": {"snapshots", "id"},
	"template": {"templates", "name"},
}

// Kinds of objects.
const (
	KindSnapshot = "snapshot"
	KindTemplate = "template"
)

// PutObject records a snapshot or template made on a host (a template
// built again on another host moves its record there).
func (s *Store) PutObject(ctx context.Context, kind string, o Object) error {
	t, ok := objectTable[kind]
	if !ok {
		return fmt.Errorf("fleet store: kind %q", kind)
	}
	q := `INSERT INTO ` + t.table + ` (` + t.key + `, project, host) VALUES ($1, $2, $3)
		ON CONFLICT (` + t.key + `) DO UPDATE SET project = EXCLUDED.project, host = EXCLUDED.host`
	if kind == KindSnapshot {
		q = `INSERT INTO snapshots (id, project, host, sandbox) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host`
		_, err := s.pool.Exec(ctx, q, o.ID, o.Project, o.Host, o.Sandbox)
		return wrap(err)
	}
	_, err := s.pool.Exec(ctx, q, o.ID, o.Project, o.Host)
	return wrap(err)
}

// GetObject returns a snapshot's or template's record.
func (s *Store) GetObject(ctx context.Context, kind, id string) (Object, error) {
	t, ok := objectTable[kind]
	if !ok {
		return Object{}, fmt.Errorf("fleet store: kind %q", kind)
	}
	sb := "''"
	if kind == KindSnapshot {
		sb = "sandbox"
	}
	var o Object
	err := s.pool.QueryRow(ctx, `SELECT `+t.key+`, project, host, `+sb+`, created_at FROM `+t.table+` WHERE `+t.key+` = $1`, id).
		Scan(&o.ID, &o.Project, &o.Host, &o.Sandbox, &o.Created)
	if err != nil {
		return Object{}, fmt.Errorf("fleet store: %s %s: %w", kind, id, wrap(err))
	}
	return o, nil
}

// ListObjects lists project's snapshots or templates ("" is every
// project's).
func (s *Store) ListObjects(ctx context.Context, kind, project string) ([]Object, error) {
	t, ok := objectTable[kind]
	if !ok {
		return nil, fmt.Errorf("fleet store: kind %q", kind)
	}
	sb := "''"
	if kind == KindSnapshot {
		sb = "sandbox"
	}
	rows, err := s.pool.Query(ctx, `SELECT `+t.key+`, project, host, `+sb+`, created_at FROM `+t.table+`
		WHERE $1 = '' OR project = $1 ORDER BY created_at`, project)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Object, error) {
		var o Object
		return o, r.Scan(&o.ID, &o.Project, &o.Host, &o.Sandbox, &o.Created)
	})
	return out, wrap(err)
}

// DeleteObject removes a snapshot's or template's record.
func (s *Store) DeleteObject(ctx context.Context, kind, id string) error {
	t, ok := objectTable[kind]
	if !ok {
		return fmt.Errorf("fleet store: kind %q", kind)
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM `+t.table+` WHERE `+t.key+` = $1`, id)
	return wrap(err)
}

// Secret is one sealed secret (the control plane seals and opens it).
type Secret struct {
	Name, Project string
	Sealed        []byte
	Created       time.Time
}

// PutSecret stores or replaces a sealed secret.
func (s *Store) PutSecret(ctx context.Context, sec Secret) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO secrets (name, project, sealed) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET sealed = EXCLUDED.sealed WHERE secrets.project = EXCLUDED.project`, sec.Name, sec.Project, sec.Sealed)
	return wrap(err)
}

// Secrets lists project's sealed secrets ("" is every project's).
func (s *Store) Secrets(ctx context.Context, project string) ([]Secret, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, project, sealed, created_at FROM secrets WHERE $1 = '' OR project = $1 ORDER BY name`, project)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Secret, error) {
		var x Secret
		return x, r.Scan(&x.Name, &x.Project, &x.Sealed, &x.Created)
	})
	return out, wrap(err)
}

// DeleteSecret removes a secret.
func (s *Store) DeleteSecret(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM secrets WHERE name = $1`, name)
	if err == nil && tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: secret %s", ErrNotFound, name)
	}
	return wrap(err)
}
