// Package storetest gives a test a real PostgreSQL (internal/pgserver,
// skipping where none is installed) and the fleet's store on it, both
// removed when the test ends.
package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/internal/pgserver"
)

// Server starts PostgreSQL for t.
func Server(t testing.TB) *pgserver.Server {
	t.Helper()
	pg, err := pgserver.Start(context.Background(), pgserver.Options{})
	if errors.Is(err, pgserver.ErrNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Remove)
	return pg
}

// Open starts PostgreSQL for t and opens the fleet's store on it.
func Open(t testing.TB) (*store.Store, *pgserver.Server) {
	t.Helper()
	pg := Server(t)
	st, err := store.Open(context.Background(), pg.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st, pg
}
