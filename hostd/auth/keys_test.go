package auth_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/store"
)

func principal(a *auth.Authenticator, key string) (store.APIKey, error) {
	r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	return a.Principal(r)
}

func TestPrincipalLifecycle(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	a := auth.New(s)
	if _, err := s.CreateProject(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	key, rec, err := auth.NewRecord("ci", "alpha", store.RoleMember, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key[len(auth.KeyPrefix):], rec.Prefix) || len(rec.Prefix) != auth.PrefixLen {
		t.Errorf("prefix: got %q of %q", rec.Prefix, key)
	}
	if err := s.CreateAPIKey(ctx, rec, auth.Hash(key)); err != nil {
		t.Fatal(err)
	}
	got, err := principal(a, key)
	if err != nil || got.ID != rec.ID || got.Project != "alpha" || got.Role != store.RoleMember {
		t.Fatalf("principal: got %+v, %v, want %s of alpha", got, err, rec.ID)
	}
	if err := a.Check(ctx, rec.ID); err != nil {
		t.Errorf("check of a live key: %v", err)
	}
	if err := s.RevokeAPIKey(ctx, rec.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := principal(a, key); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("revoked key: got %v, want ErrUnauthorized", err)
	}
	if err := a.Check(ctx, rec.ID); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("check of a revoked key: got %v, want ErrUnauthorized", err)
	}

	key2, rec2, _ := auth.NewRecord("short", "alpha", store.RoleMember, time.Now().Add(-time.Second))
	if err := s.CreateAPIKey(ctx, rec2, auth.Hash(key2)); err != nil {
		t.Fatal(err)
	}
	if _, err := principal(a, key2); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("expired key: got %v, want ErrUnauthorized", err)
	}
}

// TestBootstrapRotation: a new env key at start revokes the previous file
// key, and Rotate replaces the file's key, revoking the one before.
func TestBootstrapRotation(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	dir := t.TempDir()
	a := auth.New(s)
	fileKey, err := auth.Bootstrap(ctx, s, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	envKey, err := auth.Bootstrap(ctx, s, dir, "ab_the-operators-new-env-key-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := principal(a, fileKey); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("the old file key after a new env key: got %v, want ErrUnauthorized", err)
	}
	if k, err := principal(a, envKey); err != nil || k.Role != store.RoleAdmin || k.Project != store.DefaultProject || !k.Bootstrap {
		t.Errorf("env key: got %+v, %v, want the default project's bootstrap admin", k, err)
	}
	rotated, err := auth.Rotate(ctx, s, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := principal(a, envKey); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("the env key after a rotation: got %v, want ErrUnauthorized", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, auth.KeyFile))
	if strings.TrimSpace(string(b)) != rotated {
		t.Errorf("key file: got %q, want the rotated key", b)
	}
	if _, err := principal(a, rotated); err != nil {
		t.Errorf("rotated key: %v", err)
	}
}
