//go:build vm

package qemu

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// A QEMU waiting for a restore's migration has its announce off before the
// migration loads, so the guest is not made to announce a link that did not
// move; the bandwidth cap is lifted as before. QEMU only starts here: no
// guest code runs.
func TestIncomingQEMUDoesNotAnnounce(t *testing.T) {
	a := vmmtest.FindAssets(t)
	d, err := New(Options{Accel: vmm.AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := vmm.Config{ID: "announce", Dir: dir, Kernel: a.Kernel, Initramfs: a.Initramfs, VCPUs: 1, MemoryMiB: 128,
		ConsoleLog: filepath.Join(dir, "console.log")}
	mem, err := newMemfd(cfg.ID, cfg.MemoryMiB)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	vm, err := d.launch(ctx, cfg, append(d.args(cfg, sharedMemory(cfg.MemoryMiB)), incomingArgs...), launchOpts{mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop(context.WithoutCancel(ctx))
	var p struct {
		AnnounceRounds *int  `json:"announce-rounds"`
		MaxBandwidth   int64 `json:"max-bandwidth"`
	}
	if err := vm.qmp.query(ctx, "query-migrate-parameters", &p); err != nil {
		t.Fatal(err)
	}
	if p.AnnounceRounds == nil {
		t.Error("query-migrate-parameters: no announce-rounds")
	} else if *p.AnnounceRounds != 0 {
		t.Errorf("announce-rounds %d, want 0", *p.AnnounceRounds)
	}
	if p.MaxBandwidth != migrationBandwidth {
		t.Errorf("max-bandwidth %d, want %d", p.MaxBandwidth, int64(migrationBandwidth))
	}
}
