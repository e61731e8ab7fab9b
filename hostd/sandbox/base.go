package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/snapshot"
)

// Boot choices of a create (CreateOptions.Boot).
const (
	// BootAuto restores the built-in base snapshot when there is one (the
	// default).
	BootAuto = ""
	// BootCold boots the base image even when a base snapshot exists.
	BootCold = "cold"
)

// Every create is a restore: a create with neither template nor snapshot
// is served from a built-in base snapshot of the booted base image, one
// per shape (vcpus, memory, NIC or none), kept as a snapshot of kind
// snapshot.KindBase whose cache key names the digests of the kernel,
// initramfs and base image it booted (so a changed asset makes a new one).
// The first create of a shape boots cold and is captured right after its
// agent answers (an idle, freshly booted guest); later creates restore
// that snapshot, or claim a paused sandbox from its warm pool (the default
// shape only, Options.BasePool), with their own identity, clock, entropy
// and network like any restore.
type bases struct {
	cfg   baseConfig
	store Store
	snaps *snapshot.Engine
	log   *slog.Logger
	warm  *warm
	spawn func(func()) bool

	mu       sync.Mutex
	building map[string]bool
	bad      map[string]bool // base snapshots that failed to restore, by id
	digest   string          // of the boot assets, once known
}

// baseConfig is what of the manager's options the base snapshots depend on.
type baseConfig struct {
	on       bool // Options.BaseSnapshots
	poolSize int  // Options.BasePool
	// nic is whether the host gives sandboxes NICs; watch, whether guests
	// run the flight recorder's file watcher.
	nic, watch bool
	backend    string // the driver's name
	// defaults is the shape of a create that says nothing.
	defaults                     baseShape
	kernel, initramfs, baseImage string
}

func newBases(o Options, snaps *snapshot.Engine, w *warm, spawn func(func()) bool) *bases {
	return &bases{cfg: baseConfig{on: o.BaseSnapshots, poolSize: o.BasePool, nic: o.Network != nil, watch: o.Recorder != nil,
		backend: o.Driver.Name(), defaults: baseShape{vcpus: o.DefaultVCPUs, memMiB: o.DefaultMemoryMiB, nic: o.Network != nil},
		kernel: o.Kernel, initramfs: o.Initramfs, baseImage: o.BaseImage},
		store: o.Store, snaps: snaps, log: o.Logger, warm: w, spawn: spawn}
}

// setBad marks base snapshot id as one that does not restore.
func (b *bases) setBad(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bad == nil {
		b.bad = map[string]bool{}
	}
	b.bad[id] = true
}

func (b *bases) isBad(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bad[id]
}

// bootAfterBadBase serves a create whose base snapshot did not restore
// (rerr: its files damaged, or written by another QEMU) with a cold boot,
// which becomes the shape's new base snapshot unless one is being made.
// The bad one is set aside for this hostd's later creates, and removed
// when nothing uses it. A create whose own time ran out just fails.
func (m *Manager) bootAfterBadBase(ctx context.Context, rec store.Sandbox, opts CreateOptions, sn store.Snapshot,
	b *box, rerr error, netReady func() error) (*box, error) {
	if ctx.Err() != nil {
		return b, rerr
	}
	m.log.Warn("base snapshot did not restore; booting cold", "sandbox_id", rec.ID, "snapshot_id", sn.ID, "err", rerr)
	m.bases.setBad(sn.ID)
	if b != nil {
		b.removeCgroup()
	}
	if err := os.RemoveAll(rec.Dir); err != nil {
		return nil, errors.Join(rerr, err)
	}
	b, err := m.boot(ctx, rec, opts, netReady)
	if err != nil || !m.bases.claimBuild(sn.CacheKey, true) {
		return b, err
	}
	defer m.bases.claimBuild(sn.CacheKey, false)
	if err := m.bases.captureNew(ctx, b, rec, sn.CacheKey); err != nil {
		return b, err
	}
	if err := m.snaps.Delete(ctx, sn.ID); err == nil {
		m.log.Info("bad base snapshot removed", "snapshot_id", sn.ID)
	}
	return b, nil
}

// captureNewBase makes freshly booted b the base snapshot of key and fills
// key's warm pool, if it has one; a failed capture ends b.
func (bs *bases) captureNew(ctx context.Context, b *box, rec store.Sandbox, key string) error {
	if err := bs.capture(ctx, b, rec, key); err != nil {
		_ = b.vm.Stop(context.WithoutCancel(ctx))
		b.end(err)
		return err
	}
	if p := bs.pool(key); p != "" {
		bs.warm.refillLater(p)
	}
	return nil
}

// basePoolPrefix names a base snapshot's warm pool among the templates'.
const basePoolPrefix = "@base:"

// baseKind is the snapshot kind of base snapshots; the collector keeps them.
const baseKind = snapshot.KindBase

// baseShape is what a base snapshot is keyed by besides the assets.
type baseShape struct {
	vcpus, memMiB int
	nic           bool
}

// baseShapeOf reports the shape of a resolved create, and false when the
// create cannot be served from a base snapshot (its own base, kernel or
// initramfs, a cold boot asked for, base snapshots off).
func (bs *bases) shapeOf(opts CreateOptions) (baseShape, bool) {
	if !bs.cfg.on || opts.Boot == BootCold || opts.BaseImage != "" || opts.Kernel != "" || opts.Initramfs != "" {
		return baseShape{}, false
	}
	nic := bs.cfg.nic && opts.Network != nil && opts.Network.Mode != egress.ModeNone
	return baseShape{vcpus: opts.VCPUs, memMiB: opts.MemoryMiB, nic: nic}, true
}

// defaultShape is the shape of a create that says nothing: the one the
// warm pool serves.
func (bs *bases) defaultShape() baseShape {
	return bs.cfg.defaults
}

// key is the cache key of the base snapshot of shape s.
func (bs *bases) key(s baseShape) (string, error) {
	d, err := bs.assetDigest(bs.cfg.kernel, bs.cfg.initramfs, bs.cfg.baseImage)
	if err != nil {
		return "", err
	}
	nic := "none"
	if s.nic {
		nic = "nic"
	}
	watch := "watch"
	if !bs.cfg.watch {
		watch = "nowatch"
	}
	return fmt.Sprintf("base:%s:%dx%d:%s:%s", d, s.vcpus, s.memMiB, nic, watch), nil
}

// find returns the newest base snapshot with key.
func (bs *bases) find(ctx context.Context, key string) (store.Snapshot, bool) {
	sn, err := bs.store.FindSnapshotByKey(ctx, key)
	if err != nil || sn.Kind != baseKind || sn.Backend != bs.cfg.backend {
		return store.Snapshot{}, false
	}
	if _, err := os.Stat(sn.Dir); err != nil {
		return store.Snapshot{}, false
	}
	return sn, true
}

// claimBuild marks key's base snapshot as being made; false if it already
// is (a concurrent first create then just boots).
func (b *bases) claimBuild(key string, on bool) bool {
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

// captureBase snapshots a freshly booted box as the base snapshot of key;
// the box runs on, on a new overlay over the snapshot's layer. Older base
// snapshots that nothing uses any more go.
func (bs *bases) capture(ctx context.Context, b *box, rec store.Sandbox, key string) error {
	t0 := time.Now()
	c, err := b.client(ctx)
	if err != nil {
		return err
	}
	// A restored sandbox's first exec then finds the binaries in the page
	// cache and the agent's exec path used. Best effort: a guest that fails
	// it still gets its base snapshot (the capture checks the agent again).
	if err := warmExecs(ctx, c, bs.cfg.watch, warmRuns); err != nil {
		bs.log.Warn("base snapshot: warm-up exec", "sandbox_id", b.id, "err", err)
	}
	src := &snapshot.Source{SandboxID: b.id, VM: b.vm, Overlay: b.overlay, ParentID: b.snapshotID, NextOverlay: b.nextOverlay,
		VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, Env: map[string]string{}, Cwd: b.cwd}
	sn, err := bs.snaps.Capture(ctx, src, c, snapshot.Options{Kind: baseKind, CacheKey: key})
	if err != nil {
		return fmt.Errorf("base snapshot: %w", err)
	}
	b.overlay, b.snapshotID = src.Overlay, src.ParentID
	bs.log.Info("base snapshot made", "sandbox_id", b.id, "snapshot_id", sn.ID, "key", key, "took", time.Since(t0))
	bs.dropStale(ctx, key)
	return nil
}

// dropStaleBases deletes the base snapshots made from other boot assets
// (a kernel, initramfs or base image since replaced) that nothing uses.
func (bs *bases) dropStale(ctx context.Context, key string) {
	sns, err := bs.store.ListSnapshots(ctx)
	if err != nil {
		return
	}
	assets := strings.Split(key, ":")[1]
	for _, sn := range sns {
		f := strings.Split(sn.CacheKey, ":")
		if sn.Kind != baseKind || len(f) < 2 || f[1] == assets {
			continue
		}
		if err := bs.snaps.Delete(ctx, sn.ID); err == nil {
			bs.log.Info("stale base snapshot removed", "snapshot_id", sn.ID)
		}
	}
}

// basePool is the warm pool name of key, or "" when key has none.
func (bs *bases) pool(key string) string {
	if bs.cfg.poolSize <= 0 {
		return ""
	}
	dk, err := bs.key(bs.defaultShape())
	if err != nil || dk != key {
		return ""
	}
	return basePoolPrefix + key
}

// startBasePool fills the default shape's warm pool at start, if its base
// snapshot exists (otherwise the first create makes it, then the pool).
func (bs *bases) startPool(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if !bs.cfg.on || bs.cfg.poolSize <= 0 {
		return
	}
	bs.spawn(func() {
		key, err := bs.key(bs.defaultShape())
		if err != nil {
			bs.log.Warn("base snapshot: boot assets", "err", err)
			return
		}
		if _, ok := bs.find(ctx, key); ok {
			bs.warm.refill(ctx, basePoolPrefix+key)
		}
	})
}

// baseCreate picks how a create with no template or snapshot starts: from
// the warm pool (claimed, ok), from the base snapshot (src), or by a boot
// whose VM then becomes the base snapshot (capture is the key to capture
// it under, "" for a plain boot).
type baseCreate struct {
	src     *store.Snapshot
	capture string
	pool    string
}

func (bs *bases) plan(ctx context.Context, opts CreateOptions) baseCreate {
	shape, ok := bs.shapeOf(opts)
	if !ok {
		return baseCreate{}
	}
	key, err := bs.key(shape)
	if err != nil {
		bs.log.Warn("base snapshot: boot assets; booting", "err", err)
		return baseCreate{}
	}
	if sn, ok := bs.find(ctx, key); ok && !bs.isBad(sn.ID) {
		return baseCreate{src: &sn, pool: bs.pool(key)}
	}
	if !bs.claimBuild(key, true) {
		return baseCreate{}
	}
	return baseCreate{capture: key}
}

// assetDigest is a digest of the kernel, initramfs and base image, each by
// its content (fileDigest), computed once per Manager.
func (b *bases) assetDigest(paths ...string) (string, error) {
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
			if d, err = fileDigest(p); err != nil {
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

// fileDigest is the sha256 of path's content: taken from its name when it
// is named by it, else read (once per path, size and mtime).
func fileDigest(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
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
