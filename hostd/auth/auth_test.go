package auth_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var _ auth.KeyStore = (*store.Store)(nil)

func TestNewKey(t *testing.T) {
	k1, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := auth.NewKey()
	if !strings.HasPrefix(k1, auth.KeyPrefix) || len(k1) != len(auth.KeyPrefix)+43 {
		t.Errorf("key: got %q, want ab_ and 43 base64url characters", k1)
	}
	if k1 == k2 {
		t.Errorf("two keys: got %q twice, want different keys", k1)
	}
	if h := auth.Hash(k1); len(h) != 64 || strings.Contains(h, k1) {
		t.Errorf("hash: got %q, want 64 hex digits", h)
	}
}

func TestBootstrapGeneratesKeyFile(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	dir := filepath.Join(t.TempDir(), "data")
	key, err := auth.Bootstrap(ctx, s, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, auth.KeyFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("key file mode: got %v, want 0600", got)
	}
	b, _ := os.ReadFile(path)
	if got := strings.TrimSpace(string(b)); got != key {
		t.Errorf("key file: got %q, want %q", got, key)
	}
	if ok, err := s.HasAPIKey(ctx, auth.Hash(key)); !ok || err != nil {
		t.Errorf("stored: got %v, %v, want true", ok, err)
	}
	if ok, _ := s.HasAPIKey(ctx, key); ok {
		t.Error("the key itself is stored; want only its hash")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data dir: got %d entries, want only %s (no temp files)", len(entries), auth.KeyFile)
	}

	// A restart reads the same key back.
	again, err := auth.Bootstrap(ctx, s, dir, "")
	if err != nil || again != key {
		t.Errorf("second bootstrap: got %q, %v, want %q", again, err, key)
	}
}

func TestBootstrapExistingFileIntoFreshStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, auth.KeyFile), []byte("ab_existing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	key, err := auth.Bootstrap(ctx, s, dir, "")
	if err != nil || key != "ab_existing" {
		t.Fatalf("bootstrap: got %q, %v, want ab_existing", key, err)
	}
	if ok, _ := s.HasAPIKey(ctx, auth.Hash("ab_existing")); !ok {
		t.Error("the file's key was not stored")
	}
}

func TestBootstrapEnvKey(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	dir := t.TempDir()
	key, err := auth.Bootstrap(ctx, s, dir, "my-secret")
	if err != nil || key != "my-secret" {
		t.Fatalf("bootstrap: got %q, %v, want my-secret", key, err)
	}
	if ok, _ := s.HasAPIKey(ctx, auth.Hash("my-secret")); !ok {
		t.Error("env key not stored")
	}
	if _, err := os.Stat(filepath.Join(dir, auth.KeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("key file with an env key: got %v, want none written", err)
	}
}

func TestBootstrapEmptyFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, auth.KeyFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Bootstrap(context.Background(), openStore(t), dir, ""); err == nil {
		t.Error("bootstrap with an empty key file: got nil error, want one")
	}
}

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	key, err := auth.Bootstrap(ctx, s, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(s)
	tests := []struct {
		name, header string
		ok           bool
	}{
		{"key accepted", "Bearer " + key, true},
		{"scheme is case-insensitive", "bearer " + key, true},
		{"wrong key rejected", "Bearer ab_wrong", false},
		{"key with a typo rejected", "Bearer " + key[:len(key)-1] + "x", false},
		{"no header", "", false},
		{"basic auth", "Basic " + key, false},
		{"empty token", "Bearer ", false},
		{"no token", "Bearer", false},
		{"huge token", "Bearer " + strings.Repeat("a", 10000), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			err := a.Authenticate(r)
			if tc.ok && err != nil {
				t.Errorf("got %v, want nil", err)
			}
			if !tc.ok && !errors.Is(err, auth.ErrUnauthorized) {
				t.Errorf("got %v, want ErrUnauthorized", err)
			}
		})
	}
}

func TestAuthenticateStoreError(t *testing.T) {
	s := openStore(t)
	a := auth.New(s)
	s.Close()
	r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
	r.Header.Set("Authorization", "Bearer ab_x")
	err := a.Authenticate(r)
	if err == nil || errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("closed store: got %v, want a non-auth error", err)
	}
}
