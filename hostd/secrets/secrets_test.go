package secrets

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/hostd/store"
)

func TestSealedAtRest(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi.Mode(), err)
	}
	value := []byte("ghp_supersecretvalue1234")
	if err := b.Put(ctx, "gh", value); err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetSecret(ctx, "gh")
	if err != nil || bytes.Contains(raw, value) {
		t.Fatalf("stored value is not sealed (%v)", err)
	}
	got, err := b.SecretValue(ctx, "gh")
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("got %q, %v, want %q", got, err, value)
	}
	b2, err := Open(dir, st) // same key on the next start
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b2.SecretValue(ctx, "gh"); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("after reopen: %q, %v", got, err)
	}
	if err := b.Put(ctx, "bad name", value); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	if err := b.Delete(ctx, "gh"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SecretValue(ctx, "gh"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	db, _ := os.ReadFile(filepath.Join(dir, "db"))
	if bytes.Contains(db, value) {
		t.Fatal("plaintext in the database file")
	}
}
