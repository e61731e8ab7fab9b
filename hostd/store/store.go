// Package store is hostd's state in SQLite (modernc.org/sqlite, no cgo):
// sandboxes with their VM state and limits, snapshots, templates, API keys,
// secrets, network policies and the flight recorder's events. One *sql.DB in WAL mode serves the whole daemon;
// the schema is migrated forward by a version table when the store opens.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// ErrNotFound is wrapped by lookups of rows that do not exist.
var ErrNotFound = errors.New("store: not found")

// busyTimeoutMS is how long a connection waits for another's write lock.
const busyTimeoutMS = 5000

// Store is hostd's database. Its methods are safe for concurrent use.
type Store struct {
	db *sql.DB
	// addEvent is AddEvents' insert, prepared once: the flight recorder
	// adds events on every exec's path.
	addEvent *sql.Stmt
}

// Open opens (creating if needed) the database at path and migrates its
// schema to the current version.
func Open(ctx context.Context, path string) (*Store, error) {
	q := url.Values{}
	for _, p := range []string{
		"journal_mode(WAL)",
		fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS),
		"foreign_keys(1)",
		"synchronous(NORMAL)",
	} {
		q.Add("_pragma", p)
	}
	// BEGIN IMMEDIATE takes the write lock up front, so concurrent
	// read-then-write transactions wait (busy_timeout) instead of failing.
	q.Set("_txlock", "immediate")
	// A plain path (not a file: URI) is opened as is; the driver strips the
	// query of its own parameters.
	dsn := path + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("store: migrate %s: %w", path, err), db.Close())
	}
	if s.addEvent, err = db.PrepareContext(ctx, insertEvent); err != nil {
		return nil, errors.Join(fmt.Errorf("store: %w", err), db.Close())
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error {
	return errors.Join(s.addEvent.Close(), s.db.Close())
}

// migrations are applied in order; migrations[i] takes the schema from
// version i to i+1. Append only: never edit a released migration.
var migrations = []string{
	`CREATE TABLE sandboxes (
		id         TEXT PRIMARY KEY,
		state      TEXT NOT NULL,
		vcpus      INTEGER NOT NULL,
		memory_mib INTEGER NOT NULL,
		env        TEXT NOT NULL DEFAULT '{}',
		timeout_s  INTEGER NOT NULL DEFAULT 0,
		metadata   TEXT NOT NULL DEFAULT '{}',
		created_at INTEGER NOT NULL,
		error      TEXT NOT NULL DEFAULT '',
		vm_pid     INTEGER NOT NULL DEFAULT 0,
		dir        TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX sandboxes_created_at ON sandboxes (created_at);
	CREATE TABLE api_keys (
		hash       TEXT PRIMARY KEY,
		name       TEXT NOT NULL,
		created_at INTEGER NOT NULL
	);`,
	// Snapshots (see snapshots.go).
	`CREATE TABLE sandbox_vm (
		id          TEXT PRIMARY KEY,
		snapshot_id TEXT NOT NULL DEFAULT '',
		overlay     TEXT NOT NULL DEFAULT '',
		pause_dir   TEXT NOT NULL DEFAULT '',
		cwd         TEXT NOT NULL DEFAULT ''
	);
	CREATE TABLE snapshots (
		id          TEXT PRIMARY KEY,
		kind        TEXT NOT NULL,
		sandbox_id  TEXT NOT NULL DEFAULT '',
		parent_id   TEXT NOT NULL DEFAULT '',
		dir         TEXT NOT NULL,
		vcpus       INTEGER NOT NULL,
		memory_mib  INTEGER NOT NULL,
		env         TEXT NOT NULL DEFAULT '{}',
		cwd         TEXT NOT NULL DEFAULT '',
		backend     TEXT NOT NULL,
		size_bytes  INTEGER NOT NULL DEFAULT 0,
		cache_key   TEXT NOT NULL DEFAULT '',
		created_at  INTEGER NOT NULL
	);
	CREATE INDEX snapshots_cache_key ON snapshots (cache_key);
	CREATE TABLE templates (
		name        TEXT PRIMARY KEY,
		snapshot_id TEXT NOT NULL,
		pool_size   INTEGER NOT NULL DEFAULT 0,
		created_at  INTEGER NOT NULL
	);`,
	// 3: egress (hostd/egress): each sandbox's network policy, the network
	// audit log, and sealed secrets.
	networkSchema,
	// 4: resource limits and lifecycle options (see limits.go).
	`CREATE TABLE sandbox_limits (
		id     TEXT PRIMARY KEY,
		limits TEXT NOT NULL DEFAULT '{}'
	);`,
	// 5: the flight recorder's one ordered event log (events.go); the
	// network audit rows move into it.
	eventsSchema,
	// 6: the image a template was built from (templateimages.go).
	templateImagesSchema,
	// 7: the default user of execs, as an image's USER sets it.
	`ALTER TABLE snapshots ADD COLUMN exec_user TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandbox_vm ADD COLUMN exec_user TEXT NOT NULL DEFAULT '';`,
	// 8: projects, key lifecycle and owners (tenancy.go).
	tenancySchema,
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return err
	}
	var version int
	err = tx.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	if version > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this hostd (%d)", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = ?`, len(migrations)); err != nil {
		return err
	}
	return tx.Commit()
}
