package snapshot_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// captured returns a rig with a snapshot of kind of its booted VM. Every
// VM the rig's driver makes is stopped at the test's end.
func captured(t *testing.T, kind string) (*rig, snapshot.Record) {
	t.Helper()
	r := newRig(t)
	t.Cleanup(func() {
		for _, vm := range r.d.VMs() {
			_ = vm.Stop(context.Background())
		}
	})
	_, src := r.boot("sb-1")
	sn, err := r.e.Capture(context.Background(), src, &flusher{}, snapshot.Options{Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	return r, sn
}

// copyHooks are a Copy's hooks; they record what ran. StartCopy's caller
// reads them once it returned.
type copyHooks struct {
	netErr, cfgErr error
	cfg            vmm.Config // what Config hands in
	phases         []string
	nets, configs  int
	unplaced       int
}

// copyOf returns a Copy of from onto a new overlay of r, with h's hooks.
func (h *copyHooks) copyOf(t *testing.T, r *rig, from snapshot.From) snapshot.Copy {
	t.Helper()
	ov := r.overlay()
	if h.cfg.ID == "" {
		h.cfg = vmmtest.FakeConfig(t, "sb-copy", "")
	}
	h.cfg.Disks[0].Path = ov
	return snapshot.Copy{From: from, Overlay: ov,
		NetReady: func() error { h.nets++; return h.netErr },
		Config:   func() (vmm.Config, error) { h.configs++; return h.cfg, h.cfgErr },
		Unplace:  func() { h.unplaced++ },
		Phase:    func(name string) { h.phases = append(h.phases, name) },
	}
}

// TestStartCopy: a copy's restore runs its steps in order, and a step that
// fails stops it there, undoing the placement only once it was made.
func TestStartCopy(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		hooks    copyHooks
		corrupt  bool
		failVMM  bool
		want     error
		phases   []string
		restores int // the driver's Restore calls
		unplaced int
	}{
		{name: "restores", phases: []string{"overlay", "network_wait", "cgroup", "vmm_restore"}, restores: 1},
		{name: "network fails", hooks: copyHooks{netErr: boom}, want: boom, phases: []string{"overlay"}},
		{name: "config fails", hooks: copyHooks{cfgErr: boom}, want: boom, phases: []string{"overlay", "network_wait"}},
		{name: "restore fails", failVMM: true, want: boom, phases: []string{"overlay", "network_wait", "cgroup"},
			restores: 1, unplaced: 1},
		{name: "corrupt snapshot", corrupt: true, want: snapshot.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, sn := captured(t, snapshot.KindSnapshot)
			if tc.corrupt {
				r.e.Close() // the manifest is written
				layer := filepath.Join(sn.Dir, snapshot.LayerFile)
				if err := os.Chmod(layer, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(layer, []byte("tampered"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.failVMM {
				r.d.FailNextRestore(boom)
			}
			h := &tc.hooks
			vms := len(r.d.VMs())
			vm, err := r.e.StartCopy(context.Background(), r.d, h.copyOf(t, r, snapshot.From{Snapshot: sn}))
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !slices.Equal(h.phases, tc.phases) {
				t.Errorf("phases: got %v, want %v", h.phases, tc.phases)
			}
			if got := r.d.Restores(); got != tc.restores {
				t.Errorf("restores: got %d, want %d", got, tc.restores)
			}
			if h.unplaced != tc.unplaced {
				t.Errorf("unplaced %d times, want %d", h.unplaced, tc.unplaced)
			}
			if tc.want != nil {
				if vm != nil || len(r.d.VMs()) != vms {
					t.Errorf("a failed copy made a VM: %v, %d VMs (was %d)", vm, len(r.d.VMs()), vms)
				}
				return
			}
			fv := vm.(*vmmtest.FakeVM)
			if fv.RestoredFrom() != sn.Dir || !fv.Paused() || fv.Disks()[0].Path != h.cfg.Disks[0].Path {
				t.Errorf("copy: restored from %q (want %q), paused %v, disk %s", fv.RestoredFrom(), sn.Dir, fv.Paused(), fv.Disks()[0].Path)
			}
		})
	}
}

// TestStartCopyMemoryPolicy: only a copy of a base snapshot gets its own
// memory, whatever the caller's config said.
func TestStartCopyMemoryPolicy(t *testing.T) {
	for _, kind := range []string{snapshot.KindSnapshot, snapshot.KindFork, snapshot.KindBase} {
		t.Run(kind, func(t *testing.T) {
			r, sn := captured(t, kind)
			want := kind == snapshot.KindBase
			h := &copyHooks{cfg: vmmtest.FakeConfig(t, "sb-copy", "")}
			h.cfg.OwnMemory = !want
			vm, err := r.e.StartCopy(context.Background(), r.d, h.copyOf(t, r, snapshot.From{Snapshot: sn}))
			if err != nil {
				t.Fatal(err)
			}
			if got := vm.(*vmmtest.FakeVM).Config().OwnMemory; got != want {
				t.Errorf("OwnMemory: got %v, want %v", got, want)
			}
		})
	}
}

// TestStartCopyStaged: a copy of a snapshot being captured stages its VMM
// during the capture, waits for its end, and loads the snapshot; a capture
// that fails stops the staged VM and fails the copy with its error.
func TestStartCopyStaged(t *testing.T) {
	if _, ok := any(vmmtest.NewFakeDriver(vmmtest.FakeOptions{})).(vmm.Stager); !ok {
		t.Skip("the fake driver stages no restores")
	}
	full := errors.New("disk full")
	for _, tc := range []struct {
		name       string
		captureErr error
		phases     []string
		unplaced   int
	}{
		{name: "loads", phases: []string{"overlay", "network_wait", "cgroup", "vmm_stage", "capture_wait", "vmm_restore"}},
		{name: "capture fails", captureErr: full, phases: []string{"overlay", "network_wait", "cgroup", "vmm_stage"}, unplaced: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			t.Cleanup(func() {
				for _, vm := range r.d.VMs() {
					_ = vm.Stop(context.Background())
				}
			})
			ctx := context.Background()
			_, src := r.boot("sb-1")
			h := &copyHooks{}
			type result struct {
				vm  vmm.VM
				err error
			}
			res := make(chan result, 1)
			var gate *snapshot.Gate
			r.d.HoldNextSnapshot(1) // the VM's snapshot waits for the copy's stage
			if tc.captureErr != nil {
				r.d.FailNextSnapshot(tc.captureErr)
			}
			var c snapshot.Copy
			sn, err := r.e.Capture(ctx, src, &flusher{}, snapshot.Options{Kind: snapshot.KindFork,
				Planned: func(planned snapshot.Record) {
					gate = snapshot.NewGate(planned)
					c = h.copyOf(t, r, snapshot.From{Snapshot: planned, Gate: gate})
					go func() {
						vm, err := r.e.StartCopy(ctx, r.d, c)
						res <- result{vm, err}
					}()
				}})
			if gate == nil {
				t.Fatalf("the capture planned nothing (%v)", err)
			}
			if !errors.Is(err, tc.captureErr) {
				t.Fatalf("capture: got %v, want %v", err, tc.captureErr)
			}
			gate.Open(err)
			got := recv(t, res, "copy's end")
			if !errors.Is(got.err, tc.captureErr) || (tc.captureErr == nil) != (got.err == nil) {
				t.Fatalf("copy: got %v, want %v", got.err, tc.captureErr)
			}
			if !slices.Equal(h.phases, tc.phases) || h.unplaced != tc.unplaced {
				t.Errorf("phases %v, unplaced %d; want %v, %d", h.phases, h.unplaced, tc.phases, tc.unplaced)
			}
			if n := r.d.StagedEarly(); n != 1 {
				t.Errorf("staged during the capture: %d, want 1", n)
			}
			staged := r.d.Last()
			if tc.captureErr != nil {
				select {
				case <-staged.Done():
				default:
					t.Error("the staged VM of a failed capture runs")
				}
				if got.vm != nil {
					t.Errorf("a failed copy returned a VM")
				}
				return
			}
			if got.vm != staged || staged.RestoredFrom() != sn.Dir || !staged.Paused() {
				t.Errorf("copy: %v restored from %q, paused %v; want the staged VM, paused, on %s",
					got.vm, staged.RestoredFrom(), staged.Paused(), sn.Dir)
			}
		})
	}
}
