package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// Every create is a restore: a create with neither template nor snapshot
// is served from a built-in base snapshot of the booted base image, one
// per shape (vcpus, memory, NIC or none), kept as a snapshot of KindBase
// whose cache key names the digests of the kernel, initramfs and base
// image it booted (so a changed asset makes a new one). The first create
// of a shape boots cold and is captured right after its agent answers (an
// idle, freshly booted guest); later creates restore that snapshot, or
// claim a paused sandbox from its warm pool (the default shape only), with
// their own identity, clock, entropy and network like any restore.

// Shape is what a base snapshot is keyed by besides the boot assets.
type Shape struct {
	VCPUs, MemoryMiB int
	NIC              bool
}

// BasesConfig is what the base snapshots depend on.
type BasesConfig struct {
	// On makes creates with no template or snapshot restores of a base
	// snapshot; PoolSize is the default shape's warm pool (0: none).
	On       bool
	PoolSize int
	// Watch is whether guests run the flight recorder's file watcher.
	Watch bool
	// Backend is the driver's name.
	Backend string
	// Default is the shape of a create that says nothing.
	Default Shape
	// Kernel, Initramfs and BaseImage are the boot assets.
	Kernel, Initramfs, BaseImage string
}

// KeyStore finds snapshots by cache key (hostd/store implements it).
type KeyStore interface {
	FindSnapshotByKey(ctx context.Context, key string) (Record, error)
	ListSnapshots(ctx context.Context) ([]Record, error)
}

// BaseCatalog is the catalogue of a host's base snapshots: their keys, which
// exist, which are being made and which failed to restore.
type BaseCatalog struct {
	cfg    BasesConfig
	store  KeyStore
	engine *Engine
	log    *slog.Logger

	mu       sync.Mutex
	building map[string]bool
	bad      map[string]bool // base snapshots that failed to restore, by id
	digest   string          // of the boot assets, once known
}

// NewBaseCatalog returns the catalogue of cfg's base snapshots.
func NewBaseCatalog(cfg BasesConfig, st KeyStore, e *Engine, log *slog.Logger) *BaseCatalog {
	if log == nil {
		log = slog.Default()
	}
	return &BaseCatalog{cfg: cfg, store: st, engine: e, log: log}
}

// On reports whether creates use base snapshots.
func (b *BaseCatalog) On() bool { return b.cfg.On }

// Default is the shape of a create that says nothing: the one the warm
// pool serves.
func (b *BaseCatalog) Default() Shape { return b.cfg.Default }

// SetBad marks base snapshot id as one that does not restore.
func (b *BaseCatalog) SetBad(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bad == nil {
		b.bad = map[string]bool{}
	}
	b.bad[id] = true
}

func (b *BaseCatalog) isBad(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bad[id]
}

// Key is the cache key of the base snapshot of shape s.
func (b *BaseCatalog) Key(s Shape) (string, error) {
	d, err := b.assetDigest(b.cfg.Kernel, b.cfg.Initramfs, b.cfg.BaseImage)
	if err != nil {
		return "", err
	}
	nic := "none"
	if s.NIC {
		nic = "nic"
	}
	watch := "watch"
	if !b.cfg.Watch {
		watch = "nowatch"
	}
	return fmt.Sprintf("base:%s:%dx%d:%s:%s", d, s.VCPUs, s.MemoryMiB, nic, watch), nil
}

// Find returns the newest base snapshot with key.
func (b *BaseCatalog) Find(ctx context.Context, key string) (Record, bool) {
	sn, err := b.store.FindSnapshotByKey(ctx, key)
	if err != nil || sn.Kind != KindBase || sn.Backend != b.cfg.Backend {
		return Record{}, false
	}
	if _, err := os.Stat(sn.Dir); err != nil {
		return Record{}, false
	}
	return sn, true
}

// ClaimBuild marks key's base snapshot as being made (on) or no longer
// (off); with on it reports false if it already is (a concurrent first
// create then just boots).
func (b *BaseCatalog) ClaimBuild(key string, on bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.building == nil {
		b.building = map[string]bool{}
	}
	if on && b.building[key] {
		return false
	}
	if on {
		b.building[key] = true
	} else {
		delete(b.building, key)
	}
	return true
}

// Capture snapshots src, a freshly booted VM whose agent is c, as the base
// snapshot of key; the VM runs on, on a new overlay over the snapshot's
// layer (src is updated). Older base snapshots that nothing uses any more
// go.
func (b *BaseCatalog) Capture(ctx context.Context, src *Source, c *agentclient.Client, key string) error {
	t0 := time.Now()
	// A restored sandbox's first exec then finds the binaries in the page
	// cache and the agent's exec path used. Best effort: a guest that fails
	// it still gets its base snapshot (the capture checks the agent again).
	if err := WarmExecs(ctx, c, b.cfg.Watch, WarmRuns); err != nil {
		b.log.Warn("base snapshot: warm-up exec", "sandbox_id", src.SandboxID, "err", err)
	}
	src.Env = map[string]string{}
	sn, err := b.engine.Capture(ctx, src, c, Options{Kind: KindBase, CacheKey: key})
	if err != nil {
		return fmt.Errorf("base snapshot: %w", err)
	}
	b.log.Info("base snapshot made", "sandbox_id", src.SandboxID, "snapshot_id", sn.ID, "key", key, "took", time.Since(t0))
	b.dropStale(ctx, key)
	return nil
}

// dropStale deletes the base snapshots made from other boot assets (a
// kernel, initramfs or base image since replaced) that nothing uses.
func (b *BaseCatalog) dropStale(ctx context.Context, key string) {
	sns, err := b.store.ListSnapshots(ctx)
	if err != nil {
		return
	}
	assets := strings.Split(key, ":")[1]
	for _, sn := range sns {
		f := strings.Split(sn.CacheKey, ":")
		if sn.Kind != KindBase || len(f) < 2 || f[1] == assets {
			continue
		}
		if err := b.engine.Delete(ctx, sn.ID); err == nil {
			b.log.Info("stale base snapshot removed", "snapshot_id", sn.ID)
		}
	}
}

// poolPrefix names a base snapshot's warm pool among the templates'.
const poolPrefix = "@base:"

// Pool is the warm pool name of key, or "" when key has none.
func (b *BaseCatalog) Pool(key string) string {
	if b.cfg.PoolSize <= 0 {
		return ""
	}
	dk, err := b.Key(b.Default())
	if err != nil || dk != key {
		return ""
	}
	return poolPrefix + key
}

// PoolSource is the base snapshot that warm pool name restores and the
// pool's size; ok is false when name is not a base snapshot's pool. A
// base pool whose snapshot is gone has found false.
func (b *BaseCatalog) PoolSource(ctx context.Context, name string) (sn Record, size int, found, ok bool) {
	key, ok := strings.CutPrefix(name, poolPrefix)
	if !ok {
		return Record{}, 0, false, false
	}
	sn, found = b.Find(ctx, key)
	return sn, b.cfg.PoolSize, found, true
}

// DefaultPool is the default shape's warm pool, if it has one and its
// base snapshot exists ("" otherwise; the first create then makes both).
func (b *BaseCatalog) DefaultPool(ctx context.Context) (string, error) {
	if !b.cfg.On || b.cfg.PoolSize <= 0 {
		return "", nil
	}
	key, err := b.Key(b.Default())
	if err != nil {
		return "", fmt.Errorf("base snapshot: boot assets: %w", err)
	}
	if _, ok := b.Find(ctx, key); !ok {
		return "", nil
	}
	return poolPrefix + key, nil
}

// BasePlan is how a create with no template or snapshot starts: from the
// warm pool Pool, if it has one ready, else from the base snapshot Src,
// or by a boot whose VM then becomes the base snapshot (Capture is the key
// to capture it under, "" for a plain boot). A plan with Capture set holds
// the key's build claim: release it with ClaimBuild(key, false).
type BasePlan struct {
	Src     *Record
	Capture string
	Pool    string
}

// Plan picks how a create of shape s starts.
func (b *BaseCatalog) Plan(ctx context.Context, s Shape) BasePlan {
	key, err := b.Key(s)
	if err != nil {
		b.log.Warn("base snapshot: boot assets; booting", "err", err)
		return BasePlan{}
	}
	if sn, ok := b.Find(ctx, key); ok && !b.isBad(sn.ID) {
		return BasePlan{Src: &sn, Pool: b.Pool(key)}
	}
	if !b.ClaimBuild(key, true) {
		return BasePlan{}
	}
	return BasePlan{Capture: key}
}

// assetDigest is a digest of the kernel, initramfs and base image, each by
// its content (fileDigest), computed once per catalogue.
func (b *BaseCatalog) assetDigest(paths ...string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.digest != "" {
		return b.digest, nil
	}
	h := sha256.New()
	for _, p := range paths {
		d := ""
		if p != "" {
			var err error
			if d, err = FileDigest(p); err != nil {
				return "", err
			}
		}
		fmt.Fprintf(h, "%s\n", d)
	}
	b.digest = hex.EncodeToString(h.Sum(nil))[:24]
	return b.digest, nil
}

// digestName matches a file named by its own sha256 (images/ names the
// base image base-<sha256>.qcow2).
var digestName = regexp.MustCompile(`-([0-9a-f]{64})\.[a-z0-9]+$`)

// digests caches file digests process-wide by path, size and mtime (the
// tests start many hostds on the same assets).
var digests sync.Map

// FileDigest is the hex sha256 of path's content: taken from its name (or
// its link target's) when it is named by it, else read (once per path,
// size and mtime, process-wide).
func FileDigest(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	if m := digestName.FindStringSubmatch(path); m != nil {
		return m[1], nil
	}
	id := path + "\x00" + strconv.FormatInt(fi.Size(), 10) + "\x00" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
	if d, ok := digests.Load(id); ok {
		return d.(string), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	d := hex.EncodeToString(h.Sum(nil))
	digests.Store(id, d)
	return d, nil
}
