package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// memStore is an in-memory snapshot.Store. Users are the snapshots whose
// parent a snapshot is, plus what a test marks as using one.
type memStore struct {
	mu    sync.Mutex
	snaps map[string]snapshot.Record
	users map[string][]string
}

var errNotFound = errors.New("memstore: not found")

func newMemStore() *memStore {
	return &memStore{snaps: map[string]snapshot.Record{}, users: map[string][]string{}}
}

func (s *memStore) PutSnapshot(_ context.Context, sn snapshot.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snaps[sn.ID] = sn
	return nil
}

func (s *memStore) GetSnapshot(_ context.Context, id string) (snapshot.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, ok := s.snaps[id]
	if !ok {
		return sn, fmt.Errorf("%w: %s", errNotFound, id)
	}
	return sn, nil
}

func (s *memStore) ListSnapshots(context.Context) ([]snapshot.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []snapshot.Record
	for _, sn := range s.snaps {
		out = append(out, sn)
	}
	return out, nil
}

func (s *memStore) DeleteSnapshot(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.snaps, id)
	return nil
}

func (s *memStore) SnapshotUsers(_ context.Context, id string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	users := slices.Clone(s.users[id])
	for _, sn := range s.snaps {
		if sn.ParentID == id {
			users = append(users, "snapshot "+sn.ID)
		}
	}
	return users, nil
}

func (s *memStore) use(id, user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[id] = append(s.users[id], user)
}

func (s *memStore) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.users, id)
}

// flusher counts the flush barrier's calls.
type flusher struct {
	mu             sync.Mutex
	freezes, thaws int
}

func (f *flusher) Freeze(context.Context) error { f.mu.Lock(); f.freezes++; f.mu.Unlock(); return nil }
func (f *flusher) Thaw(context.Context) error   { f.mu.Lock(); f.thaws++; f.mu.Unlock(); return nil }

type rig struct {
	t     *testing.T
	e     *snapshot.Engine
	st    *memStore
	d     *vmmtest.FakeDriver
	dir   string
	base  string
	disks int
}

func newRig(t *testing.T) *rig {
	t.Helper()
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img is needed for overlays (Debian's qemu-utils; ci/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	st := newMemStore()
	d := vmmtest.NewFakeDriver(vmmtest.FakeOptions{})
	e, err := snapshot.New(snapshot.Config{Dir: filepath.Join(dir, "snapshots"), Backend: d.Name(), Store: st,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return &rig{t: t, e: e, st: st, d: d, dir: dir, base: base}
}

// overlay names a new overlay file of the rig's one sandbox.
func (r *rig) overlay() string {
	r.disks++
	return filepath.Join(r.dir, fmt.Sprintf("disk-%d.qcow2", r.disks))
}

// boot starts a fake VM on a fresh overlay of the base image.
func (r *rig) boot(id string) (vmm.VM, *snapshot.Source) {
	r.t.Helper()
	ctx := context.Background()
	ov := r.overlay()
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", r.base, ov).CombinedOutput(); err != nil {
		r.t.Fatalf("overlay: %v: %s", err, out)
	}
	cfg := vmmtest.FakeConfig(r.t, id, "")
	cfg.Disks[0].Path = ov
	vm, err := r.d.Start(ctx, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = vm.Stop(context.Background()) })
	return vm, &snapshot.Source{SandboxID: id, VM: vm, Overlay: ov, NextOverlay: r.overlay, VCPUs: 1, MemoryMiB: 256,
		Env: map[string]string{"A": "1"}, Cwd: "/work"}
}

func TestCaptureSwitchesDiskAndResumes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	vm, src := r.boot("sb-1")
	first := src.Overlay
	f := &flusher{}
	drained := false
	sn, err := r.e.Capture(ctx, src, f, snapshot.Options{BeforePause: func(context.Context) { drained = true }})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Kind != snapshot.KindSnapshot || sn.SandboxID != "sb-1" || sn.Env["A"] != "1" || sn.Cwd != "/work" || sn.Backend != r.d.Name() {
		t.Errorf("record: got %+v", sn)
	}
	if f.freezes != 1 || f.thaws != 1 || !drained {
		t.Errorf("flush: %d freezes, %d thaws, drained %v; want 1, 1, true", f.freezes, f.thaws, drained)
	}
	// The old overlay is now the snapshot's read-only layer; the VM writes
	// a new overlay on it.
	if src.Overlay == first || src.ParentID != sn.ID {
		t.Errorf("source after capture: overlay %s (was %s), parent %q; want a new overlay on %s", src.Overlay, first, src.ParentID, sn.ID)
	}
	fv := vm.(*vmmtest.FakeVM)
	if got := fv.Disks()[0].Path; got != src.Overlay {
		t.Errorf("the VM's disk: got %s, want %s", got, src.Overlay)
	}
	if fv.Paused() {
		t.Error("the VM stays paused after a capture without StayPaused")
	}
	fi, err := os.Stat(filepath.Join(sn.Dir, snapshot.LayerFile))
	if err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("layer: %v, %v; want a read-only file", fi, err)
	}
	if _, err := r.st.GetSnapshot(ctx, sn.ID); err != nil {
		t.Errorf("stored: %v", err)
	}
	// The manifest is written in the background; Close waits for it.
	r.e.Close()
	if _, err := os.Stat(filepath.Join(sn.Dir, snapshot.ManifestFile)); err != nil {
		t.Errorf("manifest after Close: %v", err)
	}
}

// TestCaptureOfAFork: a fork's capture of a VM that switches disks skips
// the guest flush (its children take memory and disk together) and leaves
// its files unsynced, with the boot's marker; a snapshot does neither.
func TestCaptureOfAFork(t *testing.T) {
	for _, tc := range []struct {
		kind            string
		flushes, marked bool
	}{
		{snapshot.KindFork, false, true},
		{snapshot.KindSnapshot, true, false},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			r := newRig(t)
			_, src := r.boot("sb-" + tc.kind)
			f := &flusher{}
			sn, err := r.e.Capture(context.Background(), src, f, snapshot.Options{Kind: tc.kind})
			if err != nil {
				t.Fatal(err)
			}
			if got := f.freezes == 1 && f.thaws == 1; got != tc.flushes || (!got && f.freezes+f.thaws != 0) {
				t.Errorf("%d freezes, %d thaws; want a flush: %v", f.freezes, f.thaws, tc.flushes)
			}
			_, err = os.Stat(filepath.Join(sn.Dir, "unsynced"))
			if marked := err == nil; marked != tc.marked {
				t.Errorf("unsynced marker: %v, want it: %v", err, tc.marked)
			}
			r.e.Close()
			if err := snapshot.NewChecker().Verify(sn.Dir); err != nil {
				t.Errorf("verify: %v", err)
			}
		})
	}
}

func TestCaptureStaysPausedAndFailsCleanly(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	vm, src := r.boot("sb-1")
	if _, err := r.e.Capture(ctx, src, &flusher{}, snapshot.Options{StayPaused: true, Kind: snapshot.KindFork}); err != nil {
		t.Fatal(err)
	}
	if !vm.(*vmmtest.FakeVM).Paused() {
		t.Error("StayPaused: the VM runs")
	}
	if err := vm.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	r.d.FailNextSnapshot(errors.New("disk full"))
	if _, err := r.e.Capture(ctx, src, &flusher{}, snapshot.Options{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("got %v, want the VM's snapshot error", err)
	}
	if vm.(*vmmtest.FakeVM).Paused() {
		t.Error("a failed capture leaves the VM paused")
	}
	list, _ := r.st.ListSnapshots(ctx)
	ents, _ := os.ReadDir(filepath.Join(r.dir, "snapshots"))
	if len(list) != 1 || len(ents) != 1 {
		t.Errorf("after a failed capture: %d records, %d directories; want the first snapshot's only", len(list), len(ents))
	}
}

func TestPrepareAndRestore(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	_, src := r.boot("sb-1")
	sn, err := r.e.Capture(ctx, src, &flusher{}, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(r.dir, "fork.qcow2")
	if err := r.e.Prepare(ctx, sn, ov); err != nil {
		t.Fatal(err)
	}
	cfg := vmmtest.FakeConfig(t, "sb-2", "")
	cfg.Disks[0].Path = ov
	vm, err := r.e.Restore(ctx, r.d, cfg, sn)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop(ctx)
	if err := vm.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := vm.Dial(ctx, channel.AgentPort)
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.New(conn)
	defer c.Close()
	if _, err := c.Health(ctx); err != nil {
		t.Errorf("restored agent: %v", err)
	}
	if got := vm.(*vmmtest.FakeVM).RestoredFrom(); got != sn.Dir {
		t.Errorf("restored from %s, want %s", got, sn.Dir)
	}
	// Another backend's snapshot is refused, and so is a corrupt one.
	other := sn
	other.Backend = "cloud-hypervisor"
	if err := r.e.Prepare(ctx, other, filepath.Join(r.dir, "x.qcow2")); !errors.Is(err, vmm.ErrUnsupported) {
		t.Errorf("another backend's snapshot: got %v, want ErrUnsupported", err)
	}
	r.e.Close() // the manifest is written
	if err := os.Chmod(filepath.Join(sn.Dir, snapshot.LayerFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sn.Dir, snapshot.LayerFile), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Prepare(ctx, sn, filepath.Join(r.dir, "y.qcow2")); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("tampered layer: got %v, want ErrCorrupt", err)
	}
}

func TestLineageDeleteAndCollect(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	_, src := r.boot("sb-1")
	a, err := r.e.Capture(ctx, src, &flusher{}, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.e.Capture(ctx, src, &flusher{}, snapshot.Options{Kind: snapshot.KindFork})
	if err != nil {
		t.Fatal(err)
	}
	if b.ParentID != a.ID {
		t.Fatalf("lineage: %s's parent is %q, want %s", b.ID, b.ParentID, a.ID)
	}
	info, err := r.e.Get(ctx, a.ID)
	if err != nil || len(info.UsedBy) != 1 || info.UsedBy[0] != "snapshot "+b.ID {
		t.Errorf("users of %s: got %v, %v", a.ID, info.UsedBy, err)
	}
	if err := r.e.Delete(ctx, a.ID); !errors.Is(err, snapshot.ErrInUse) {
		t.Errorf("delete a parent: got %v, want ErrInUse", err)
	}
	r.st.use(b.ID, "sandbox sb-2")
	r.e.Collect(ctx)
	if _, err := r.e.Get(ctx, b.ID); err != nil {
		t.Errorf("a fork snapshot in use was collected: %v", err)
	}
	r.st.release(b.ID)
	r.e.Collect(ctx)
	if _, err := r.e.Get(ctx, b.ID); !errors.Is(err, errNotFound) {
		t.Errorf("an unused fork snapshot: got %v, want collected", err)
	}
	if _, err := os.Stat(b.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("collected snapshot's dir: %v", err)
	}
	// Asked-for snapshots stay until deleted.
	if err := r.e.Delete(ctx, a.ID); err != nil {
		t.Errorf("delete: %v", err)
	}
	list, _ := r.e.List(ctx)
	if len(list) != 0 {
		t.Errorf("left: %+v", list)
	}
}

func TestSweepRemovesUnrecordedDirs(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	_, src := r.boot("sb-1")
	sn, err := r.e.Capture(ctx, src, &flusher{}, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(r.dir, "snapshots", "sn-unfinished")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan dir: %v, want removed", err)
	}
	if _, err := os.Stat(sn.Dir); err != nil {
		t.Errorf("recorded snapshot's dir: %v", err)
	}
}
