package snapshot_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/agentbox/agentbox/snapshot"
)

// A held snapshot is neither deleted nor collected: a fork snapshot that
// nothing in the store uses yet survives until its last hold ends.
func TestHoldKeepsASnapshot(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	_, src := r.boot("sb-1")
	t.Cleanup(func() {
		for _, vm := range r.d.VMs() {
			_ = vm.Stop(context.Background())
		}
	})
	sn, err := r.e.Capture(ctx, src, &flusher{}, snapshot.Options{Kind: snapshot.KindFork, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	r.e.Hold(sn.ID) // a second hold: a restore of it
	r.e.Collect(ctx)
	if err := r.e.Delete(ctx, sn.ID); !errors.Is(err, snapshot.ErrInUse) {
		t.Fatalf("delete a held snapshot: got %v, want ErrInUse", err)
	}
	r.e.Release(sn.ID)
	r.e.Collect(ctx)
	if _, err := os.Stat(sn.Dir); err != nil {
		t.Fatalf("collected with one hold left: %v", err)
	}
	r.e.Release(sn.ID)
	r.e.Collect(ctx)
	if _, err := os.Stat(sn.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a fork snapshot nothing holds or uses was not collected: %v", err)
	}
}

// HoldSnapshot of a snapshot that is gone is the store's error, and holds
// nothing.
func TestHoldSnapshotGone(t *testing.T) {
	r := newRig(t)
	if _, err := r.e.HoldSnapshot(context.Background(), "sn-nope"); err == nil {
		t.Fatal("HoldSnapshot of an unknown id: no error")
	}
}
