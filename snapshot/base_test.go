package snapshot_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/snapshot"
)

// FindSnapshotByKey makes memStore a snapshot.KeyStore: the newest
// snapshot with key.
func (s *memStore) FindSnapshotByKey(_ context.Context, key string) (snapshot.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found snapshot.Record
	for _, sn := range s.snaps {
		if sn.CacheKey == key && (found.ID == "" || sn.CreatedAt.After(found.CreatedAt)) {
			found = sn
		}
	}
	if found.ID == "" {
		return found, errNotFound
	}
	return found, nil
}

var _ snapshot.KeyStore = (*memStore)(nil)

var defaultShape = snapshot.Shape{VCPUs: 1, MemoryMiB: 256, NIC: true}

// basesConfig writes boot assets of these contents into a new directory
// and returns the catalogue's config of them: on, watching, backend fake,
// a pool of 2 for defaultShape. An image named base-<64 hex>.qcow2 is
// named by its digest.
func basesConfig(t *testing.T, kernel, initramfs, image string) snapshot.BasesConfig {
	t.Helper()
	dir := t.TempDir()
	cfg := snapshot.BasesConfig{On: true, PoolSize: 2, Watch: true, Backend: "fake", Default: defaultShape}
	name := "base.qcow2"
	if n, ok := strings.CutPrefix(image, "named:"); ok {
		name, image = n, "image of "+n
	}
	for _, f := range []struct {
		path       *string
		name, data string
	}{{&cfg.Kernel, "vmlinux", kernel}, {&cfg.Initramfs, "initramfs", initramfs}, {&cfg.BaseImage, name, image}} {
		*f.path = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.path, []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

func newBases(cfg snapshot.BasesConfig, st snapshot.KeyStore, e *snapshot.Engine) *snapshot.BaseCatalog {
	return snapshot.NewBaseCatalog(cfg, st, e, slog.New(slog.DiscardHandler))
}

func keyOf(t *testing.T, b *snapshot.BaseCatalog, s snapshot.Shape) string {
	t.Helper()
	k, err := b.Key(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestBaseKey: a base snapshot's key names its shape, the watcher, and a
// digest of the boot assets' content (an asset named by its digest is not
// read).
func TestBaseKey(t *testing.T) {
	cfg := basesConfig(t, "kernel", "initramfs", "image")
	key := keyOf(t, newBases(cfg, newMemStore(), nil), defaultShape)
	if !strings.HasPrefix(key, "base:") || !strings.HasSuffix(key, ":1x256:nic:watch") {
		t.Errorf("key: got %s, want base:<assets>:1x256:nic:watch", key)
	}
	assets := strings.Split(key, ":")[1]
	named := "named:base-" + strings.Repeat("ab", 32) + ".qcow2"
	for _, tc := range []struct {
		name   string
		cfg    snapshot.BasesConfig
		shape  snapshot.Shape
		suffix string // of the key
		same   bool   // the same assets' digest
	}{
		{"more vcpus", cfg, snapshot.Shape{VCPUs: 2, MemoryMiB: 256, NIC: true}, ":2x256:nic:watch", true},
		{"more memory", cfg, snapshot.Shape{VCPUs: 1, MemoryMiB: 512, NIC: true}, ":1x512:nic:watch", true},
		{"no nic", cfg, snapshot.Shape{VCPUs: 1, MemoryMiB: 256}, ":1x256:none:watch", true},
		{"no watcher", func() snapshot.BasesConfig { c := cfg; c.Watch = false; return c }(), defaultShape, ":1x256:nic:nowatch", true},
		{"same content elsewhere", basesConfig(t, "kernel", "initramfs", "image"), defaultShape, ":1x256:nic:watch", true},
		{"other kernel", basesConfig(t, "kernel 2", "initramfs", "image"), defaultShape, ":1x256:nic:watch", false},
		{"other initramfs", basesConfig(t, "kernel", "initramfs 2", "image"), defaultShape, ":1x256:nic:watch", false},
		{"other image", basesConfig(t, "kernel", "initramfs", "image 2"), defaultShape, ":1x256:nic:watch", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := keyOf(t, newBases(tc.cfg, newMemStore(), nil), tc.shape)
			if !strings.HasSuffix(k, tc.suffix) || (strings.Split(k, ":")[1] == assets) != tc.same {
				t.Errorf("got %s, want a key ending %s, its assets' digest the same as %s: %v", k, tc.suffix, assets, tc.same)
			}
		})
	}
	t.Run("image named by its digest", func(t *testing.T) {
		a := keyOf(t, newBases(basesConfig(t, "kernel", "initramfs", named), newMemStore(), nil), defaultShape)
		c := basesConfig(t, "kernel", "initramfs", named)
		if err := os.WriteFile(c.BaseImage, []byte("other content, same name"), 0o644); err != nil {
			t.Fatal(err)
		}
		if b := keyOf(t, newBases(c, newMemStore(), nil), defaultShape); a != b || a == key {
			t.Errorf("got %s and %s, want one key, not %s", a, b, key)
		}
	})
	t.Run("missing asset", func(t *testing.T) {
		c := cfg
		c.Kernel = filepath.Join(t.TempDir(), "none")
		if k, err := newBases(c, newMemStore(), nil).Key(defaultShape); err == nil {
			t.Errorf("got %s, want an error", k)
		}
	})
}

// baseRecord is a base snapshot of key with a directory.
func baseRecord(t *testing.T, id, key string) snapshot.Record {
	return snapshot.Record{ID: id, Kind: snapshot.KindBase, Backend: "fake", CacheKey: key, Dir: t.TempDir(), CreatedAt: time.Now()}
}

// TestBasePlan: the first create of a shape claims its base snapshot's
// build, later ones boot until the claim is released; once the snapshot
// exists creates restore it (from the pool for the default shape), unless
// it failed to restore.
func TestBasePlan(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	b := newBases(basesConfig(t, "kernel", "initramfs", "image"), st, nil)
	key := keyOf(t, b, defaultShape)
	small := snapshot.Shape{VCPUs: 1, MemoryMiB: 128}
	if p := b.Plan(ctx, defaultShape); p != (snapshot.BasePlan{Capture: key}) {
		t.Fatalf("first plan: got %+v, want a capture of %s", p, key)
	}
	if p := b.Plan(ctx, defaultShape); p != (snapshot.BasePlan{}) {
		t.Errorf("plan while claimed: got %+v, want a plain boot", p)
	}
	if p := b.Plan(ctx, small); p.Capture != keyOf(t, b, small) {
		t.Errorf("another shape's plan: got %+v, want its own capture", p)
	}
	if !b.ClaimBuild(key, false) {
		t.Error("a release: false")
	}
	if p := b.Plan(ctx, defaultShape); p.Capture != key {
		t.Errorf("plan after the release: got %+v, want a capture", p)
	}
	b.ClaimBuild(key, false)
	sn := baseRecord(t, "sn-base", key)
	_ = st.PutSnapshot(ctx, sn)
	p := b.Plan(ctx, defaultShape)
	if p.Src == nil || p.Src.ID != sn.ID || p.Capture != "" || p.Pool != "@base:"+key {
		t.Errorf("plan with the snapshot: got %+v, want it restored, pool @base:%s", p, key)
	}
	b.SetBad(sn.ID)
	if p := b.Plan(ctx, defaultShape); p != (snapshot.BasePlan{Capture: key}) {
		t.Errorf("plan with a bad snapshot: got %+v, want a new capture", p)
	}
}

func TestBaseFind(t *testing.T) {
	ctx := context.Background()
	const key = "base:abc:1x256:nic:watch"
	for _, tc := range []struct {
		name  string
		edit  func(*snapshot.Record)
		found bool
	}{
		{"base", func(*snapshot.Record) {}, true},
		{"other kind", func(sn *snapshot.Record) { sn.Kind = snapshot.KindSnapshot }, false},
		{"other backend", func(sn *snapshot.Record) { sn.Backend = "qemu" }, false},
		{"no directory", func(sn *snapshot.Record) { sn.Dir = filepath.Join(sn.Dir, "gone") }, false},
		{"other key", func(sn *snapshot.Record) { sn.CacheKey = "base:def:1x256:nic:watch" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore()
			sn := baseRecord(t, "sn-base", key)
			tc.edit(&sn)
			_ = st.PutSnapshot(ctx, sn)
			got, ok := newBases(snapshot.BasesConfig{Backend: "fake"}, st, nil).Find(ctx, key)
			if ok != tc.found || (ok && got.ID != sn.ID) {
				t.Errorf("got %+v, %v; want found %v", got, ok, tc.found)
			}
		})
	}
}

// TestBasePool: only the default shape has a warm pool, of PoolSize; its
// name leads back to its base snapshot.
func TestBasePool(t *testing.T) {
	ctx := context.Background()
	cfg := basesConfig(t, "kernel", "initramfs", "image")
	st := newMemStore()
	b := newBases(cfg, st, nil)
	key := keyOf(t, b, defaultShape)
	pool := "@base:" + key
	if got := b.Pool(key); got != pool {
		t.Errorf("default shape's pool: got %q, want %q", got, pool)
	}
	if got := b.Pool(keyOf(t, b, snapshot.Shape{VCPUs: 2, MemoryMiB: 256, NIC: true})); got != "" {
		t.Errorf("another shape's pool: got %q, want none", got)
	}
	noPool := cfg
	noPool.PoolSize = 0
	if got := newBases(noPool, st, nil).Pool(key); got != "" {
		t.Errorf("PoolSize 0: got %q, want none", got)
	}
	if _, _, _, ok := b.PoolSource(ctx, "tpl-python"); ok {
		t.Error("a template's pool is a base snapshot's")
	}
	if got, err := b.DefaultPool(ctx); err != nil || got != "" {
		t.Errorf("default pool before the snapshot: %q, %v; want none", got, err)
	}
	if _, size, found, ok := b.PoolSource(ctx, pool); !ok || found || size != 2 {
		t.Errorf("pool source before the snapshot: size %d, found %v, ok %v; want 2, false, true", size, found, ok)
	}
	sn := baseRecord(t, "sn-base", key)
	_ = st.PutSnapshot(ctx, sn)
	if got, size, found, ok := b.PoolSource(ctx, pool); !ok || !found || size != 2 || got.ID != sn.ID {
		t.Errorf("pool source: %s, size %d, found %v, ok %v; want %s, 2, true, true", got.ID, size, found, ok, sn.ID)
	}
	if got, err := b.DefaultPool(ctx); err != nil || got != pool {
		t.Errorf("default pool: %q, %v; want %q", got, err, pool)
	}
	for name, c := range map[string]snapshot.BasesConfig{"off": func() snapshot.BasesConfig { c := cfg; c.On = false; return c }(),
		"no pool": noPool} {
		if got, err := newBases(c, st, nil).DefaultPool(ctx); err != nil || got != "" {
			t.Errorf("%s: default pool %q, %v; want none", name, got, err)
		}
	}
	gone := cfg
	gone.Initramfs = filepath.Join(t.TempDir(), "none")
	if _, err := newBases(gone, st, nil).DefaultPool(ctx); err == nil {
		t.Error("default pool without boot assets: no error")
	}
	if p := newBases(gone, st, nil).Plan(ctx, defaultShape); p != (snapshot.BasePlan{}) {
		t.Errorf("plan without boot assets: got %+v, want a plain boot", p)
	}
}

// TestBaseCapture: a booted VM becomes the base snapshot of its key, which
// creates then restore, and the base snapshots of other boot assets go
// unless something uses them.
func TestBaseCapture(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	vm, src := r.boot("sb-base")
	conn, err := vm.Dial(ctx, channel.AgentPort)
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.New(conn)
	t.Cleanup(func() { c.Close() })
	cfg := basesConfig(t, "kernel", "initramfs", "image")
	cfg.Backend = r.d.Name()
	b := newBases(cfg, r.st, r.e)
	key := keyOf(t, b, defaultShape)
	stale, used := baseRecord(t, "sn-stale", "base:old:1x256:nic:watch"), baseRecord(t, "sn-used", "base:old:2x256:nic:watch")
	other := baseRecord(t, "sn-other", strings.Replace(key, ":1x256:", ":2x512:", 1))
	for _, sn := range []snapshot.Record{stale, used, other} {
		sn.Backend = cfg.Backend
		_ = r.st.PutSnapshot(ctx, sn)
	}
	r.st.use(used.ID, "sandbox sb-2")
	if !b.ClaimBuild(key, true) {
		t.Fatal("claim: false")
	}
	if err := b.Capture(ctx, src, c, key); err != nil {
		t.Fatal(err)
	}
	b.ClaimBuild(key, false)
	p := b.Plan(ctx, defaultShape)
	if p.Src == nil || p.Src.Kind != snapshot.KindBase || p.Src.CacheKey != key || len(p.Src.Env) != 0 {
		t.Fatalf("plan after the capture: got %+v, want the base snapshot of %s", p.Src, key)
	}
	for _, tc := range []struct {
		sn   snapshot.Record
		kept bool
	}{{stale, false}, {used, true}, {other, true}} {
		_, err := r.st.GetSnapshot(ctx, tc.sn.ID)
		if kept := err == nil; kept != tc.kept {
			t.Errorf("%s kept: %v, want %v", tc.sn.ID, kept, tc.kept)
		}
	}
	full := errors.New("disk full")
	r.d.FailNextSnapshot(full)
	if err := b.Capture(ctx, src, c, key); !errors.Is(err, full) {
		t.Errorf("a failed capture: got %v, want %v", err, full)
	}
}
