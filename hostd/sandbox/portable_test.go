package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/s3test"
	"github.com/agentbox/agentbox/snapshot/chunks"
)

const portableBucket = "portable"

// portableStore is a chunk store on s3's bucket with a cache of its own,
// closed when the test ends.
func portableStore(t *testing.T, s3 *s3test.Server) *chunks.Store {
	t.Helper()
	b, err := chunks.NewS3(chunks.S3Config{Endpoint: s3.Endpoint, Bucket: portableBucket, Prefix: "fleet", Region: "us-east-1",
		AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	st, err := chunks.New(chunks.Config{Bucket: b, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func withStore(st *chunks.Store, host string) func(*Options) {
	return func(o *Options) { o.SnapshotStore, o.HostName = st, host }
}

// TestPortablePauseAndImport drives two managers (the fake driver, real
// qcow2 disks) sharing one S3 bucket: a pause with the store down fails
// and the sandbox runs on; an idle pause is durable; the other manager
// resumes the sandbox it never held; the first releases its copy (the
// store keeps it) and a delete forgets it in the store; a host with
// another kernel refuses the import and keeps nothing; a template made on
// one is fetched once by the other.
func TestPortablePauseAndImport(t *testing.T) {
	s3 := s3test.Start(t, portableBucket)
	stA, stB, stC := portableStore(t, s3), portableStore(t, s3), portableStore(t, s3)
	a, b := newEnv(t, withStore(stA, "a")), newEnv(t, withStore(stB, "b"))
	ctx := context.Background()

	info := a.create(CreateOptions{})
	s3.SetDown(true)
	_, err := a.m.Pause(ctx, info.ID)
	s3.SetDown(false)
	if !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("pause with the store down: %v, want ErrStoreUnavailable", err)
	}
	if out, _ := a.run(info.ID, "echo on"); out != "on\n" {
		t.Fatalf("after the failed pause: %q", out)
	}
	if got, _ := a.m.Get(ctx, info.ID); got.State != StateRunning || got.Durable {
		t.Fatalf("after the failed pause: %+v", got)
	}
	p, err := a.m.Pause(ctx, info.ID)
	if err != nil || !p.Durable || p.DurableManifest == "" || p.DurableAt.IsZero() {
		t.Fatalf("pause: %+v %v", p, err)
	}

	if _, err := b.m.Resume(ctx, "sb-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resume of a sandbox no store holds: %v", err)
	}
	got, err := b.m.Resume(ctx, info.ID)
	if err != nil || got.State != StateRunning {
		t.Fatalf("resume on b: %+v %v", got, err)
	}
	if out, _ := b.run(info.ID, "echo moved"); out != "moved\n" {
		t.Fatalf("on b: %q", out)
	}
	if err := a.m.ReleaseSandbox(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.m.Get(ctx, info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the release a has it: %v", err)
	}
	if _, err := stA.GetRef(ctx, refSandboxes, info.ID); err != nil {
		t.Fatalf("the release dropped the ref: %v", err)
	}

	// Another kernel: refused, nothing made.
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(kernel, []byte("another kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newEnv(t, withStore(stC, "c"), func(o *Options) { o.Kernel = kernel })
	if _, err := b.m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.m.Resume(ctx, info.ID); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("resume with another kernel: %v, want ErrIncompatible", err)
	}
	if _, err := c.m.Get(ctx, info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the refused import c has it: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.data, "sandboxes")); len(ents) != 0 {
		t.Fatalf("after the refused import: %v", ents)
	}
	if err := b.m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := stB.GetRef(ctx, refSandboxes, info.ID); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the delete left the ref: %v", err)
	}

	// A template made on a is fetched once by b.
	src := a.create(CreateOptions{})
	sn, err := a.m.Snapshot(ctx, src.ID, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.CreateTemplate(ctx, "shared", sn.ID, 0); err != nil {
		t.Fatal(err)
	}
	s3.ResetCounts()
	b.create(CreateOptions{Template: "shared"})
	first := s3.Count(http.MethodGet, "fleet/chunks/")
	b.create(CreateOptions{Template: "shared"})
	if second := s3.Count(http.MethodGet, "fleet/chunks/") - first; first == 0 || second != 0 {
		t.Fatalf("chunk GETs: first create %d (want > 0), second %d (want 0)", first, second)
	}
	// Each env's leak check counts the others' goroutines: close them all
	// before the first check.
	c.close()
	b.close()
	a.close()
}
