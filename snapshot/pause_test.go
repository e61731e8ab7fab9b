package snapshot_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/snapshot"
)

// flushCount is a snapshot.Flusher that counts its calls and can fail.
type flushCount struct {
	freezes, thaws int
	fail           error
}

func (f *flushCount) Freeze(context.Context) error { f.freezes++; return f.fail }
func (f *flushCount) Thaw(context.Context) error   { f.thaws++; return nil }

// TestSavePaused: a pause flushes the guest, pauses the VM and saves it
// whole to a fresh directory, from which the driver restores it.
func TestSavePaused(t *testing.T) {
	ctx := context.Background()
	_, vm := restored(t, nil)
	if err := vm.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "paused")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale")
	if err := os.WriteFile(stale, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &flushCount{}
	if err := snapshot.SavePaused(ctx, vm, f, dir); err != nil {
		t.Fatal(err)
	}
	if f.freezes != 1 || f.thaws != 1 {
		t.Errorf("flushes: got %d freezes, %d thaws, want 1 and 1", f.freezes, f.thaws)
	}
	if !vm.Paused() {
		t.Error("VM runs after SavePaused, want it paused")
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file of the old directory survived: %v", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("saved directory: %v entries, %v; want the VM's files", len(ents), err)
	}
}

// TestSavePausedFlushFails: a guest whose filesystems cannot be flushed
// is not paused, and nothing is written.
func TestSavePausedFlushFails(t *testing.T) {
	ctx := context.Background()
	_, vm := restored(t, nil)
	if err := vm.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "paused")
	boom := errors.New("freeze refused")
	if err := snapshot.SavePaused(ctx, vm, &flushCount{fail: boom}, dir); !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
	if vm.Paused() {
		t.Error("VM paused after a failed flush")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory made after a failed flush: %v", err)
	}
}
