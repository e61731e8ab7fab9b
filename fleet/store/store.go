// Package store is the fleet's state in PostgreSQL (DESIGN R17): the hosts
// with their leases, epochs and capacity; where every sandbox, snapshot and
// template lives; projects, hashed API keys and sealed secrets. It is the
// only package that speaks SQL to the fleet's database; the control plane
// (fleet/gateway), its leader (fleet/lease) and each host's agent
// (hostd/fleetagent) go through it.
//
// The schema is in migrations/, embedded in the binary and applied by
// Migrate under an advisory lock, so replicas that start together apply it
// once.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Errors the store's callers tell apart (wrapped with detail).
var (
	ErrNotFound = errors.New("fleet store: not found")
	ErrExists   = errors.New("fleet store: already exists")
	// ErrFenced is a write refused because the writer's epoch is not the
	// host's current one: another epoch owns what it would change.
	ErrFenced = errors.New("fleet store: stale host epoch")
	// ErrNoCapacity is a placement that fits no live host.
	ErrNoCapacity = errors.New("fleet store: no host has room")
	// ErrUnavailable wraps a failure to reach the database.
	ErrUnavailable = errors.New("fleet store: database unavailable")
	// ErrQuota is a placement over its project's quota.
	ErrQuota = errors.New("fleet store: project quota exceeded")
)

// Store is a pool of connections to the fleet's database.
type Store struct {
	pool *pgxpool.Pool
	dsn  string
}

// Open connects to dsn (a postgres:// URL or key=value string) and
// applies the migrations. The connect timeout is short: a database that
// is down fails calls fast instead of hanging them.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("fleet store: dsn: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 3*time.Second {
		cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	}
	cfg.MaxConns = max(cfg.MaxConns, 16)
	cfg.HealthCheckPeriod = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet store: %w", err)
	}
	s := &Store{pool: pool, dsn: dsn}
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Migrate applies the embedded migrations that the database lacks.
func (s *Store) Migrate(ctx context.Context) error {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return migrate(ctx, db)
}

func migrate(ctx context.Context, db *sql.DB) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("fleet store: migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, mustSub(), goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("fleet store: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("fleet store: migrate: %w", wrap(err))
	}
	return nil
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return wrap(s.pool.Ping(ctx))
}

// wrap marks connection failures as ErrUnavailable (a caller answers 503
// with Retry-After) and leaves SQL errors as they are.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrExists), errors.Is(err, ErrFenced),
		errors.Is(err, ErrNoCapacity), errors.Is(err, ErrUnavailable), errors.Is(err, ErrQuota):
		return err
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.As(err, &pe):
		if pe.Code == "23505" {
			return fmt.Errorf("%w: %s", ErrExists, pe.Detail)
		}
		if pe.Code[:2] == "57" || pe.Code[:2] == "08" { // operator intervention, connection exception
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	case errors.Is(err, context.Canceled):
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// tx runs fn in a transaction.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return wrap(pgx.BeginFunc(ctx, s.pool, fn))
}
