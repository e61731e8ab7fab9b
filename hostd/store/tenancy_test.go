package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestMigrateToProjects opens a store made by the schema before projects
// (version 7, with one of each kind of row) and finds everything owned by
// the default project, its keys admin keys of it, the file key a
// bootstrap key.
func TestMigrateToProjects(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentbox.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	old := []string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`, `INSERT INTO schema_version (version) VALUES (7)`}
	old = append(old, migrations[:7]...)
	old = append(old,
		`INSERT INTO sandboxes (id, state, vcpus, memory_mib, created_at) VALUES ('sb1', 'running', 1, 512, 1)`,
		`INSERT INTO snapshots (id, kind, dir, vcpus, memory_mib, backend, created_at) VALUES ('sn1', 'snapshot', '/d', 1, 512, 'qemu', 1)`,
		`INSERT INTO templates (name, snapshot_id, created_at) VALUES ('py', 'sn1', 1)`,
		`INSERT INTO secrets (name, sealed, created_at) VALUES ('gh', x'00', 1)`,
		`INSERT INTO api_keys (hash, name, created_at) VALUES ('aaaaaaaaaaaaaaaaaaaa', 'api-key', 1)`,
		`INSERT INTO api_keys (hash, name, created_at) VALUES ('bbbbbbbbbbbbbbbbbbbb', 'team-a', 1)`)
	for _, q := range old {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, o := range []struct{ kind, id string }{{KindSandbox, "sb1"}, {KindSnapshot, "sn1"}, {KindTemplate, "py"}, {KindSecret, "gh"}} {
		got, err := s.GetOwner(ctx, o.kind, o.id)
		if err != nil || got.Project != DefaultProject {
			t.Errorf("owner of %s %s: got %+v, %v, want %s", o.kind, o.id, got, err, DefaultProject)
		}
	}
	if _, err := s.GetSandbox(ctx, "sb1"); err != nil {
		t.Errorf("sandbox kept: %v", err)
	}
	keys, err := s.ListAPIKeys(ctx, DefaultProject)
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys: got %+v, %v, want 2", keys, err)
	}
	for _, k := range keys {
		if k.Role != RoleAdmin || k.ID == "" || k.Bootstrap != (k.Name == "api-key") {
			t.Errorf("migrated key: got %+v, want an admin with an id, bootstrap iff the file key", k)
		}
	}
	if ok, _ := s.HasAPIKey(ctx, "bbbbbbbbbbbbbbbbbbbb"); !ok {
		t.Error("a migrated key is refused")
	}
}

func TestAPIKeyLifecycle(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	now := time.Now().UTC()
	if _, err := s.CreateProject(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProject(ctx, "alpha"); !errors.Is(err, ErrExists) {
		t.Errorf("second create: got %v, want ErrExists", err)
	}
	k := APIKey{ID: "key_1", Name: "ci", Prefix: "abcdefgh", Project: "alpha", Role: RoleMember, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := s.CreateAPIKey(ctx, k, "h1"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAPIKey(ctx, APIKey{ID: "key_2", Project: "nope", Role: RoleMember, CreatedAt: now}, "h2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown project: got %v, want ErrNotFound", err)
	}
	got, err := s.APIKeyByHash(ctx, "h1")
	if err != nil || got.ID != "key_1" || got.Project != "alpha" || got.Role != RoleMember || !got.Valid(now) || got.Valid(now.Add(2*time.Hour)) {
		t.Errorf("by hash: got %+v, %v", got, err)
	}
	if list, _ := s.ListAPIKeys(ctx, "alpha"); len(list) != 1 {
		t.Errorf("list alpha: got %+v, want key_1", list)
	}
	if err := s.RevokeAPIKey(ctx, "key_1", now); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAPIKey(ctx, "key_1", now); !errors.Is(err, ErrNotFound) {
		t.Errorf("second revoke: got %v, want ErrNotFound", err)
	}
	if ok, _ := s.HasAPIKey(ctx, "h1"); ok {
		t.Error("a revoked key is accepted")
	}
	if list, _ := s.ListAPIKeys(ctx, ""); len(list) != 0 {
		t.Errorf("list after revoke: got %+v, want none", list)
	}
}

func TestBootstrapKeyReplaces(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	now := time.Now()
	for _, h := range []string{"old", "old", "new"} {
		if err := s.AddBootstrapKey(ctx, APIKey{ID: "key_" + h, Name: "api-key", CreatedAt: now}, h); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := s.HasAPIKey(ctx, "old"); ok {
		t.Error("the previous bootstrap key is accepted")
	}
	if ok, _ := s.HasAPIKey(ctx, "new"); !ok {
		t.Error("the new bootstrap key is refused")
	}
}

// A snapshot with no owner of its own (a fork's, made by hostd) belongs to
// the project of the sandbox it was taken from; one of no owned sandbox
// (a warm pool's, a base snapshot) to none.
func TestSnapshotOwnedThroughItsSandbox(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for _, sn := range []Snapshot{{ID: "sn-fork", Kind: "fork", SandboxID: "sb-a", Dir: "/d1", Backend: "qemu"},
		{ID: "sn-own", Kind: "snapshot", SandboxID: "sb-a", Dir: "/d2", Backend: "qemu"},
		{ID: "sn-base", Kind: "base", SandboxID: "sb-pool", Dir: "/d3", Backend: "qemu"}} {
		if err := s.PutSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetOwner(ctx, KindSandbox, "sb-a", Owner{Project: "alpha"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetOwner(ctx, KindSnapshot, "sn-own", Owner{Project: "beta"}); err != nil {
		t.Fatal(err)
	}
	if o, err := s.GetOwner(ctx, KindSnapshot, "sn-fork"); err != nil || o.Project != "alpha" {
		t.Errorf("fork snapshot's owner: %+v, %v; want alpha, its sandbox's", o, err)
	}
	if _, err := s.GetOwner(ctx, KindSnapshot, "sn-base"); !errors.Is(err, ErrNotFound) {
		t.Errorf("base snapshot's owner: %v, want none", err)
	}
	all, err := s.Owners(ctx, KindSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if all["sn-fork"].Project != "alpha" || all["sn-own"].Project != "beta" || len(all) != 2 {
		t.Errorf("owners: %+v, want sn-fork alpha (its sandbox's) and sn-own beta (its own)", all)
	}
}
