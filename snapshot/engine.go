package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/vmm"
)

// LayerFile is a snapshot's frozen disk layer, in its directory.
const LayerFile = "disk.qcow2"

// Kinds of snapshot. Fork snapshots are collected once nothing uses them.
const (
	KindSnapshot = "snapshot"
	KindFork     = "fork"
	KindStep     = "step"
	// KindBase is a host's built-in snapshot of its booted base image,
	// which creates without a template restore; kept like KindSnapshot.
	KindBase = "base"
)

// ErrInUse refuses to delete a snapshot that something still uses.
var ErrInUse = errors.New("snapshot: in use")

// Record is a snapshot as the store keeps it.
type Record struct {
	ID string
	// Kind is KindSnapshot (asked for), KindFork (made for a fork) or
	// KindStep (a template build step).
	Kind      string
	SandboxID string
	// ParentID is the snapshot whose disk layer this one's layer overlays.
	ParentID         string
	Dir              string
	VCPUs, MemoryMiB int
	Env              map[string]string
	Cwd              string
	User             string // the default user of execs ("" = root)
	Backend          string
	SizeBytes        int64
	CacheKey         string
	CreatedAt        time.Time
}

// Info describes a snapshot with its lineage.
type Info struct {
	ID        string
	Kind      string
	SandboxID string
	// ParentID is the snapshot this one's disk layer overlays (lineage).
	ParentID  string
	VCPUs     int
	MemoryMiB int
	SizeBytes int64
	CacheKey  string
	CreatedAt time.Time
	// UsedBy are the snapshots, sandboxes and templates that refer to this
	// one, sorted; a snapshot is deletable when it is empty.
	UsedBy []string
}

// Store persists snapshot records and answers who uses a snapshot
// (hostd/store implements it). Lookups of unknown ids return an error that
// the caller can recognise (the store's own not-found error).
type Store interface {
	PutSnapshot(ctx context.Context, sn Record) error
	GetSnapshot(ctx context.Context, id string) (Record, error)
	ListSnapshots(ctx context.Context) ([]Record, error)
	DeleteSnapshot(ctx context.Context, id string) error
	SnapshotUsers(ctx context.Context, id string) ([]string, error)
}

// Flusher writes a guest's dirty filesystem data to its disk (the guest
// agent's Freeze and Thaw do).
type Flusher interface {
	Freeze(ctx context.Context) error
	Thaw(ctx context.Context) error
}

// Config configures an Engine.
type Config struct {
	// Dir holds one directory per snapshot.
	Dir string
	// Backend names the driver whose snapshots these are.
	Backend string
	Store   Store
	Logger  *slog.Logger
	// Own, if set, hands new files to the VMM's user.
	Own func(paths ...string) error
}

// Engine captures and prepares snapshots. Its methods are safe for
// concurrent use; captures of one VM must not overlap (the caller
// serializes operations on a sandbox).
type Engine struct {
	cfg     Config
	log     *slog.Logger
	checker *Checker
	wg      sync.WaitGroup // manifests being written

	// gcMu serializes removals (Delete, Collect) with holds: a snapshot
	// held is never removed, and one removed is never held after.
	gcMu  sync.Mutex
	holds map[string]int
}

// Hold keeps snapshot id from Delete and Collect until as many Releases:
// a snapshot that something is about to use (a fork's copies, a restore,
// a template being made) before the store records that use. A hold of a
// snapshot being removed waits for the removal; the caller then finds it
// gone in the store.
func (e *Engine) Hold(id string) {
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	if e.holds == nil {
		e.holds = map[string]int{}
	}
	e.holds[id]++
}

// Release ends one Hold of id.
func (e *Engine) Release(id string) {
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	if e.holds[id]--; e.holds[id] <= 0 {
		delete(e.holds, id)
	}
}

// HoldSnapshot holds snapshot id (Hold) and returns its record, or the
// store's error (not found: it was removed first) with no hold.
func (e *Engine) HoldSnapshot(ctx context.Context, id string) (Record, error) {
	e.Hold(id)
	sn, err := e.cfg.Store.GetSnapshot(ctx, id)
	if err != nil {
		e.Release(id)
	}
	return sn, err
}

// New returns an Engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Dir == "" || cfg.Store == nil {
		return nil, errors.New("snapshot: Dir and Store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Own == nil {
		cfg.Own = func(...string) error { return nil }
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, log: cfg.Logger, checker: NewChecker()}, nil
}

// Close waits for the manifests being written in the background.
func (e *Engine) Close() { e.wg.Wait() }

// Source is the running sandbox that Capture snapshots. Capture moves it
// onto a new overlay when its VM can switch disks, and updates Overlay and
// ParentID then.
type Source struct {
	SandboxID string
	VM        vmm.VM
	// Overlay is the disk file the VM writes; ParentID the snapshot whose
	// layer it overlays ("" for the base image).
	Overlay  string
	ParentID string
	// NextOverlay names a fresh overlay file of the sandbox.
	NextOverlay func() string
	// VCPUs, MemoryMiB, Env, Cwd and User are recorded for sandboxes
	// started from the snapshot.
	VCPUs, MemoryMiB int
	Env              map[string]string
	Cwd              string
	User             string
}

// Options are the choices of one capture.
type Options struct {
	// Kind is KindSnapshot (default), KindFork or KindStep.
	Kind string
	// CacheKey is recorded for template build steps.
	CacheKey string
	// StayPaused leaves the VM paused after the capture.
	StayPaused bool
	// BeforePause, if set, runs after the flush and before the pause (the
	// flight recorder drains the guest's events there).
	BeforePause func(ctx context.Context)
	// Planned, if set, is called with the snapshot being made once its
	// disk layer is frozen and its VM planned the rest (vmm.SnapshotPlanner),
	// before the VM's state is written: a fork stages its copies' VMMs
	// there (Stage). It is not called for a VM that cannot plan.
	Planned func(sn Record)
	// Hold holds the new snapshot (Engine.Hold) from before its record
	// exists: the caller releases it (Engine.Release) once the store
	// records what uses it.
	Hold bool
}

// Capture snapshots src: the guest's filesystems are flushed through f, the
// VM is paused, its overlay becomes the snapshot's read-only layer (under a
// fresh overlay, or as a copy), and its device state and memory are saved.
// The VM resumes unless opts.StayPaused. The snapshot is usable at once; its
// manifest is written in the background (Close waits for it; Sweep writes
// it at start if a hostd ended first).
func (e *Engine) Capture(ctx context.Context, src *Source, f Flusher, opts Options) (Record, error) {
	if opts.Kind == "" {
		opts.Kind = KindSnapshot
	}
	ph := e.phases(src.SandboxID)
	if needsFlush(src.VM, opts.Kind) {
		// A flush barrier: freeze writes everything out, thaw at once, so
		// the saved memory holds no frozen filesystem.
		if err := errors.Join(f.Freeze(ctx), f.Thaw(ctx)); err != nil {
			return Record{}, fmt.Errorf("snapshot: flush guest filesystems: %w", err)
		}
		ph("flush")
	}
	if opts.BeforePause != nil {
		opts.BeforePause(ctx)
		ph("drain")
	}
	if err := src.VM.Pause(ctx); err != nil {
		return Record{}, fmt.Errorf("snapshot: pause: %w", err)
	}
	ph("pause")
	sn, err := e.capture(ctx, src, opts, ph)
	if !opts.StayPaused {
		err = errors.Join(err, src.VM.Resume(context.WithoutCancel(ctx)))
		ph("resume")
	}
	if err != nil {
		return Record{}, fmt.Errorf("snapshot: capture %s: %w", src.SandboxID, err)
	}
	e.log.Info("snapshot taken", "sandbox_id", src.SandboxID, "snapshot_id", sn.ID, "kind", sn.Kind, "size", sn.SizeBytes)
	return sn, nil
}

// needsFlush reports whether a capture of kind from vm flushes the guest's
// filesystems first. A snapshot's disk layer must stand on its own, as a
// template's base or a disk that outlives its memory. A fork's need not:
// its children start from its memory and its disk together, as they were
// at the pause, and a VMM that switches disks writes its own caches out as
// the layer becomes a backing file.
func needsFlush(vm vmm.VM, kind string) bool {
	_, switches := vm.(vmm.DiskSwitcher)
	return kind != KindFork || !switches
}

// phases returns a function that logs, at each call, how long the phase
// it names took since the last call, as the "create phase" debug records
// of hostd (path "capture"; `make bench` prints them).
func (e *Engine) phases(id string) func(name string) {
	last := time.Now()
	return func(name string) {
		now := time.Now()
		e.log.Debug("create phase", "sandbox_id", id, "path", "capture", "phase", name, "took", now.Sub(last))
		last = now
	}
}

// capture writes the snapshot of src's paused VM.
func (e *Engine) capture(ctx context.Context, src *Source, opts Options, ph func(string)) (Record, error) {
	sn := Record{ID: "sn-" + randomHex(6), Kind: opts.Kind, SandboxID: src.SandboxID, ParentID: src.ParentID,
		VCPUs: src.VCPUs, MemoryMiB: src.MemoryMiB, Env: src.Env, Cwd: src.Cwd, User: src.User, Backend: e.cfg.Backend,
		CacheKey: opts.CacheKey, CreatedAt: time.Now().UTC()}
	sn.Dir = filepath.Join(e.cfg.Dir, sn.ID)
	if err := os.MkdirAll(sn.Dir, 0o700); err != nil {
		return sn, err
	}
	fail := func(err error) (Record, error) {
		os.RemoveAll(sn.Dir)
		return sn, err
	}
	if err := e.freezeDisk(ctx, src, sn); err != nil {
		return fail(err)
	}
	ph("disk")
	if pl, ok := src.VM.(vmm.SnapshotPlanner); ok && opts.Planned != nil {
		if err := pl.PlanSnapshot(ctx, sn.Dir); err != nil {
			return fail(err)
		}
		opts.Planned(sn)
		ph("plan")
	}
	if err := src.VM.Snapshot(ctx, sn.Dir); err != nil {
		return fail(err)
	}
	ph("vm_snapshot")
	// A snapshot is on stable storage before it is answered. A fork's is
	// not synced: its children restore from the page cache, and the kernel
	// writes it back. Its marker says so (rebuildManifest).
	persist := SyncVMFiles
	if opts.Kind == KindFork {
		persist = markUnsynced
	}
	if err := persist(sn.Dir); err != nil {
		return fail(err)
	}
	ph("sync")
	names, size, err := dirFiles(sn.Dir)
	if err != nil {
		return fail(err)
	}
	// Restores may use the snapshot at once; its checksums are written in
	// the background (a snapshot without them is refused after a restart).
	if err := e.checker.Fresh(sn.Dir, names); err != nil {
		return fail(err)
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.writeManifest(sn.Dir, names)
	}()
	sn.SizeBytes = size
	if opts.Hold {
		e.Hold(sn.ID)
	}
	if err := e.cfg.Store.PutSnapshot(ctx, sn); err != nil {
		if opts.Hold {
			e.Release(sn.ID)
		}
		return fail(err)
	}
	ph("record")
	return sn, nil
}

// freezeDisk makes src's current overlay the snapshot's layer. With a VM
// that can switch disks, the overlay file itself becomes the layer
// (hard-linked into the snapshot) and the guest moves onto a new overlay
// backed by it; otherwise the layer is a streamed copy.
func (e *Engine) freezeDisk(ctx context.Context, src *Source, sn Record) error {
	layer := filepath.Join(sn.Dir, LayerFile)
	sw, ok := src.VM.(vmm.DiskSwitcher)
	if !ok {
		return copyFile(src.Overlay, layer)
	}
	if err := os.Link(src.Overlay, layer); err != nil {
		return err
	}
	next := src.NextOverlay()
	if err := disk.CreateOverlay(ctx, layer, next, 0); err != nil {
		return err
	}
	if err := e.cfg.Own(next); err != nil {
		return err
	}
	if err := sw.SwitchDisk(ctx, 0, next); err != nil {
		os.Remove(next)
		return err
	}
	if err := freeze(layer); err != nil {
		return err
	}
	src.Overlay, src.ParentID = next, sn.ID
	return nil
}

// unsyncedFile marks a snapshot whose files were left to the page cache (a
// fork's): it holds the boot id of the host that wrote them.
const unsyncedFile = "unsynced"

// bootIDPath is where Linux says which boot this is.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// markUnsynced writes dir's unsynced marker, on stable storage before the
// snapshot is recorded: a snapshot of the same boot is still whole in the
// page cache after a hostd crash, and one of an earlier boot may be torn.
func markUnsynced(dir string) error {
	id, err := os.ReadFile(bootIDPath)
	if err != nil {
		return fmt.Errorf("snapshot: boot id: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, unsyncedFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	_, err = f.Write(bytes.TrimSpace(id))
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return err
	}
	return syncPath(dir)
}

// syncedOrSameBoot lets rebuildManifest sum the files of dir: they were
// synced at the capture, or they were left to the page cache in this boot
// and are synced now. Files of an earlier boot that were never synced may
// be torn, and are refused.
func syncedOrSameBoot(dir string) error {
	mark, err := os.ReadFile(filepath.Join(dir, unsyncedFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	id, err := os.ReadFile(bootIDPath)
	if err != nil {
		return fmt.Errorf("snapshot: boot id: %w", err)
	}
	if !bytes.Equal(bytes.TrimSpace(mark), bytes.TrimSpace(id)) {
		return errors.New("the host restarted before the snapshot's files reached the disk")
	}
	return SyncVMFiles(dir)
}

// SyncVMFiles puts the files that a VM's Snapshot wrote into dir (all but
// the disk layer) and dir itself on stable storage: vmm.VM.Snapshot leaves
// them to the page cache, so that a fork need not wait for the disk.
func SyncVMFiles(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if ent.Name() == LayerFile || !ent.Type().IsRegular() {
			continue
		}
		if err := syncPath(filepath.Join(dir, ent.Name())); err != nil {
			return err
		}
	}
	return syncPath(dir)
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// freeze makes a frozen layer read-only and hands it back to hostd's user:
// the VMM that wrote it (Config.Own gave it the file) now only reads it,
// through a descriptor it reopened read-only, and must not be able to make
// it writable again, since restores and forks share it.
func freeze(layer string) error {
	fi, err := os.Lstat(layer)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
		if err := os.Lchown(layer, os.Geteuid(), os.Getegid()); err != nil {
			return fmt.Errorf("snapshot: take back the layer: %w", err)
		}
	}
	return os.Chmod(layer, 0o444)
}

// writeManifest sums a fresh snapshot's files and writes their manifest,
// unless they changed since the capture: then the snapshot stays without
// one, and is refused.
func (e *Engine) writeManifest(dir string, names []string) {
	man, err := Sums(dir, names)
	if err == nil && !e.checker.Unchanged(dir) {
		err = errors.New("files changed after the capture")
	}
	if err == nil {
		err = man.Write(dir)
	}
	if err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			e.log.Error("snapshot manifest not written", "dir", dir, "err", err)
		}
		return
	}
	e.checker.Trust(dir, man)
}

// Prepare checks sn's files against its manifest and makes overlay, a
// fresh copy-on-write disk on sn's layer, for a VM restored from it. A
// snapshot that fails its checksums is refused with an error wrapping
// ErrCorrupt; one made by another backend with vmm.ErrUnsupported.
func (e *Engine) Prepare(ctx context.Context, sn Record, overlay string) error {
	if err := e.Check(sn); err != nil {
		return err
	}
	return e.Overlay(ctx, sn, overlay)
}

// Check checks sn's files against its manifest, or, for a snapshot this
// engine captured since its start, that they did not change since.
func (e *Engine) Check(sn Record) error {
	if sn.Backend != e.cfg.Backend {
		return fmt.Errorf("%w: snapshot %s was made by %s, and this host runs %s", vmm.ErrUnsupported, sn.ID, sn.Backend, e.cfg.Backend)
	}
	return e.checker.Verify(sn.Dir)
}

// Overlay makes overlay, a fresh copy-on-write disk on sn's layer, without
// Prepare's check: for a VM staged on sn while sn is captured (Planned),
// which checks sn once the capture ended.
func (e *Engine) Overlay(ctx context.Context, sn Record, overlay string) error {
	if err := disk.CreateOverlay(ctx, filepath.Join(sn.Dir, LayerFile), overlay, 0); err != nil {
		return err
	}
	return e.cfg.Own(overlay)
}

// Restore launches a VM of d from sn, paused (vmm.Driver.Restore), with
// cfg, whose root disk should be an overlay that Prepare made.
func (e *Engine) Restore(ctx context.Context, d vmm.Driver, cfg vmm.Config, sn Record) (vmm.VM, error) {
	if d.Name() != e.cfg.Backend {
		return nil, fmt.Errorf("%w: this engine keeps %s snapshots, not %s", vmm.ErrUnsupported, e.cfg.Backend, d.Name())
	}
	return d.Restore(ctx, cfg, sn.Dir)
}

// Stage launches a VM of d for sn while sn is captured (Planned), with
// cfg, whose root disk should be an overlay that Overlay made. Its Load,
// once the capture ended and Check passed, restores it (vmm.Stager). A
// driver that cannot stage is vmm.ErrUnsupported.
func (e *Engine) Stage(ctx context.Context, d vmm.Driver, cfg vmm.Config, sn Record) (vmm.StagedVM, error) {
	st, ok := d.(vmm.Stager)
	if !ok || d.Name() != e.cfg.Backend {
		return nil, fmt.Errorf("%w: %s cannot stage a restore of a %s snapshot", vmm.ErrUnsupported, d.Name(), e.cfg.Backend)
	}
	return st.StageRestore(ctx, cfg, sn.Dir)
}

// Get describes snapshot id with its users.
func (e *Engine) Get(ctx context.Context, id string) (Info, error) {
	sn, err := e.cfg.Store.GetSnapshot(ctx, id)
	if err != nil {
		return Info{}, err
	}
	return e.Info(ctx, sn)
}

// List describes every snapshot.
func (e *Engine) List(ctx context.Context) ([]Info, error) {
	sns, err := e.cfg.Store.ListSnapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(sns))
	for _, sn := range sns {
		info, err := e.Info(ctx, sn)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Info describes sn with its users.
func (e *Engine) Info(ctx context.Context, sn Record) (Info, error) {
	users, err := e.cfg.Store.SnapshotUsers(ctx, sn.ID)
	if err != nil {
		return Info{}, err
	}
	sort.Strings(users)
	return Info{ID: sn.ID, Kind: sn.Kind, SandboxID: sn.SandboxID, ParentID: sn.ParentID, VCPUs: sn.VCPUs,
		MemoryMiB: sn.MemoryMiB, SizeBytes: sn.SizeBytes, CacheKey: sn.CacheKey, CreatedAt: sn.CreatedAt, UsedBy: users}, nil
}

// Delete removes a snapshot that nothing refers to, then collects the fork
// snapshots that freed. A snapshot that a sandbox, another snapshot or a
// template still uses is refused with ErrInUse.
func (e *Engine) Delete(ctx context.Context, id string) error {
	if err := e.deleteOne(ctx, id); err != nil {
		return err
	}
	e.Collect(ctx)
	return nil
}

// deleteOne is Delete without the collection, under gcMu.
func (e *Engine) deleteOne(ctx context.Context, id string) error {
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	sn, err := e.cfg.Store.GetSnapshot(ctx, id)
	if err != nil {
		return err
	}
	if e.holds[id] > 0 {
		return fmt.Errorf("%w: snapshot %s is being used (a fork, restore or template under way)", ErrInUse, id)
	}
	users, err := e.cfg.Store.SnapshotUsers(ctx, id)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: snapshot %s is used by %v", ErrInUse, id, users)
	}
	return e.remove(ctx, sn)
}

func (e *Engine) remove(ctx context.Context, sn Record) error {
	if err := os.RemoveAll(sn.Dir); err != nil {
		return err
	}
	e.log.Info("snapshot removed", "snapshot_id", sn.ID)
	return e.cfg.Store.DeleteSnapshot(ctx, sn.ID)
}

// Collect removes fork snapshots that nothing refers to any more,
// repeating while removing one frees its parent.
func (e *Engine) Collect(ctx context.Context) {
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	for {
		sns, err := e.cfg.Store.ListSnapshots(ctx)
		if err != nil {
			e.log.Error("gc: list snapshots", "err", err)
			return
		}
		removed := 0
		for _, sn := range sns {
			if sn.Kind != KindFork || e.holds[sn.ID] > 0 {
				continue
			}
			users, err := e.cfg.Store.SnapshotUsers(ctx, sn.ID)
			if err != nil || len(users) > 0 {
				continue
			}
			if err := e.remove(ctx, sn); err != nil {
				e.log.Error("gc: remove snapshot", "snapshot_id", sn.ID, "err", err)
				continue
			}
			removed++
		}
		if removed == 0 {
			return
		}
	}
}

// Sweep runs at start. It removes snapshot directories that no record
// names (a capture that did not finish before its host stopped), and
// writes the manifest of each recorded snapshot whose background manifest
// the previous hostd did not finish (rebuildManifest).
func (e *Engine) Sweep(ctx context.Context) error {
	sns, err := e.cfg.Store.ListSnapshots(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, sn := range sns {
		known[filepath.Base(sn.Dir)] = true
		if err := e.rebuildManifest(sn); err != nil {
			e.log.Error("snapshot manifest not rebuilt; restores of it will be refused", "snapshot_id", sn.ID, "err", err)
		}
	}
	ents, err := os.ReadDir(e.cfg.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, ent := range ents {
		if !known[ent.Name()] {
			e.log.Warn("removing orphaned snapshot dir", "snapshot_id", ent.Name())
			os.RemoveAll(filepath.Join(e.cfg.Dir, ent.Name()))
		}
	}
	return nil
}

// rebuildManifest writes the manifest of snapshot sn if it has none. That
// is sound after a hostd crash: capture records a snapshot only once the
// VMM has written all its files, and nothing writes them afterwards (the
// layer is read-only and no longer the VM's disk; restored VMs map the
// memory file privately). After a host restart it is sound only for files
// that were synced: a fork's unsynced ones are refused (syncedOrSameBoot).
// A snapshot whose directory is gone stays without one, and its restores
// are refused.
func (e *Engine) rebuildManifest(sn Record) error {
	if _, err := os.Stat(filepath.Join(sn.Dir, ManifestFile)); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	os.Remove(filepath.Join(sn.Dir, ManifestFile+".tmp")) // a Write cut short
	if err := syncedOrSameBoot(sn.Dir); err != nil {
		return err
	}
	names, _, err := dirFiles(sn.Dir)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("snapshot %s has no files", sn.ID)
	}
	man, err := WriteManifest(sn.Dir, names)
	if err != nil {
		return err
	}
	e.checker.Trust(sn.Dir, man)
	e.log.Warn("snapshot manifest rebuilt at start (the previous hostd stopped before writing it)", "snapshot_id", sn.ID)
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func dirFiles(dir string) ([]string, int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	var names []string
	var size int64
	for _, ent := range ents {
		if ent.Name() == ManifestFile || ent.Name() == ManifestFile+".tmp" {
			continue
		}
		fi, err := ent.Info()
		if err != nil {
			return nil, 0, err
		}
		names = append(names, ent.Name())
		size += allocated(fi)
	}
	return names, size, nil
}

// allocated is the disk space a file takes (holes are free).
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// copyFile copies an overlay into a snapshot as its read-only layer,
// streaming (an overlay can be large) and syncing before it counts.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Sync(), dst.Close())
}
