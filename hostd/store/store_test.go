package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
)

func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestSandboxes(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	a := Sandbox{ID: "a", State: "creating", VCPUs: 2, MemoryMiB: 1024, TimeoutS: 60,
		Env: map[string]string{"K": "v"}, Metadata: map[string]string{"owner": "me"},
		CreatedAt: t0.Add(time.Second), Dir: "/var/lib/agentbox/sandboxes/a"}
	b := Sandbox{ID: "b", State: "running", VCPUs: 1, MemoryMiB: 512, CreatedAt: t0}
	for _, sb := range []Sandbox{a, b} {
		if err := s.PutSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}

	got, err := s.GetSandbox(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Errorf("get: got %+v, want %+v", got, a)
	}

	list, err := s.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "b" || list[1].ID != "a" {
		t.Errorf("list order: got %+v, want b, a", list)
	}
	if list[0].Env == nil || len(list[0].Env) != 0 {
		t.Errorf("nil env: got %#v, want empty map", list[0].Env)
	}

	if err := s.SetSandboxState(ctx, "a", "failed", "boot timed out", 99); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetSandbox(ctx, "a")
	if got.State != "failed" || got.Error != "boot timed out" || got.VMPID != 99 {
		t.Errorf("after SetSandboxState: got %+v", got)
	}

	a.State = "running"
	if err := s.PutSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "a"); got.State != "running" || got.Error != "" {
		t.Errorf("after replace: got %+v, want running, no error", got)
	}

	if err := s.DeleteSandbox(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx, "a"); err != nil {
		t.Errorf("second delete: got %v, want nil", err)
	}
	if _, err := s.GetSandbox(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get deleted: got %v, want ErrNotFound", err)
	}
	if err := s.SetSandboxState(ctx, "a", "running", "", 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("set state of deleted: got %v, want ErrNotFound", err)
	}
}

func TestAPIKeys(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for range 2 {
		if err := s.AddAPIKey(ctx, "bootstrap", "abc123"); err != nil {
			t.Fatalf("AddAPIKey: %v", err)
		}
	}
	tests := []struct {
		hash string
		want bool
	}{
		{"abc123", true},
		{"abc124", false},
		{"", false},
	}
	for _, tc := range tests {
		t.Run(tc.hash, func(t *testing.T) {
			got, err := s.HasAPIKey(ctx, tc.hash)
			if err != nil || got != tc.want {
				t.Errorf("HasAPIKey(%q): got %v, %v, want %v", tc.hash, got, err, tc.want)
			}
		})
	}
}

func TestReopenKeepsDataAndVersion(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	if err := s.PutSandbox(ctx, Sandbox{ID: "x", State: "running", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.GetSandbox(ctx, "x"); err != nil {
		t.Errorf("after reopen: got %v, want the sandbox", err)
	}
	var v int
	if err := s2.db.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v); err != nil || v != len(migrations) {
		t.Errorf("schema version: got %d, %v, want %d", v, err, len(migrations))
	}
	var mode string
	if err := s2.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode: got %q, %v, want wal", mode, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	if _, err := s.db.ExecContext(ctx, `UPDATE schema_version SET version = 999`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s2, err := Open(ctx, path); err == nil {
		s2.Close()
		t.Fatal("Open of a newer schema: got nil error, want one")
	}
}

func TestConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	// A second Store on the same file, as a restarted hostd would have.
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 100 {
		wg.Go(func() {
			st := []*Store{s, s2}[i%2]
			id := fmt.Sprintf("sb%03d", i)
			if err := st.PutSandbox(ctx, Sandbox{ID: id, State: "creating", CreatedAt: time.Now()}); err != nil {
				errs <- err
				return
			}
			if err := st.SetSandboxState(ctx, id, "running", "", i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, err := s.ListSandboxes(ctx)
	if err != nil || len(list) != 100 {
		t.Errorf("list: got %d, %v, want 100", len(list), err)
	}
}

func TestTemplateImage(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTemplate(ctx, Template{Name: "bb", SnapshotID: "sn-1", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ti := TemplateImage{Name: "bb", SnapshotID: "sn-1", Ref: "r/bb:1", Digest: "sha256:ab", Base: "/b.qcow2", Config: []byte(`{"user":"1"}`)}
	if err := s.PutTemplateImage(ctx, ti); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTemplateImage(ctx, "bb")
	if err != nil || got.Ref != ti.Ref || string(got.Config) != `{"user":"1"}` {
		t.Fatalf("got %+v, %v", got, err)
	}
	// Renamed onto another snapshot, the template no longer is the image's.
	if err := s.PutTemplate(ctx, Template{Name: "bb", SnapshotID: "sn-2", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTemplateImage(ctx, "bb"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the template moved: %v, want ErrNotFound", err)
	}
}

func TestTemplateImageOfSnapshot(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// sn-img (the image template's) <- sn-a <- sn-b; sn-x has no image.
	for _, sn := range []Snapshot{{ID: "sn-img"}, {ID: "sn-a", ParentID: "sn-img"}, {ID: "sn-b", ParentID: "sn-a", User: "app"}, {ID: "sn-x"}} {
		sn.Kind, sn.Dir, sn.Backend, sn.CreatedAt = "step", "/d/"+sn.ID, "qemu", time.Now()
		if err := s.PutSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.GetSnapshot(ctx, "sn-b"); err != nil || got.User != "app" {
		t.Fatalf("snapshot user: got %q, %v", got.User, err)
	}
	if err := s.PutTemplateImage(ctx, TemplateImage{Name: "img", SnapshotID: "sn-img", Ref: "r", Digest: "d", Base: "/b"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sn-img", "sn-a", "sn-b"} {
		if ti, err := s.TemplateImageOfSnapshot(ctx, id); err != nil || ti.Name != "img" {
			t.Errorf("%s: got %+v, %v, want image img", id, ti, err)
		}
	}
	for _, id := range []string{"sn-x", "sn-none"} {
		if _, err := s.TemplateImageOfSnapshot(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: got %v, want ErrNotFound", id, err)
		}
	}
}
