package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// memStore keeps snapshot records in memory (the engine's persistence).
type memStore struct{ recs map[string]Record }

func (s *memStore) PutSnapshot(_ context.Context, sn Record) error { s.recs[sn.ID] = sn; return nil }
func (s *memStore) GetSnapshot(_ context.Context, id string) (Record, error) {
	if sn, ok := s.recs[id]; ok {
		return sn, nil
	}
	return Record{}, errors.New("not found")
}
func (s *memStore) ListSnapshots(context.Context) ([]Record, error) {
	var out []Record
	for _, sn := range s.recs {
		out = append(out, sn)
	}
	return out, nil
}
func (s *memStore) DeleteSnapshot(_ context.Context, id string) error       { delete(s.recs, id); return nil }
func (s *memStore) SnapshotUsers(context.Context, string) ([]string, error) { return nil, nil }

// TestSweepRebuildsMissingManifest: a snapshot recorded (answered 201) by
// a hostd killed before its background manifest was written is usable
// after a restart: Sweep writes the manifest, and its restores verify.
// A directory no record names is removed.
func TestSweepRebuildsMissingManifest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := &memStore{recs: map[string]Record{}}
	sn := Record{ID: "sn-1", Dir: filepath.Join(dir, "sn-1"), Backend: "qemu"}
	if err := os.MkdirAll(sn.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{LayerFile: "layer", "memory": "guest memory", "state": "devices",
		ManifestFile + ".tmp": `{"files":[` /* a Write cut short */} {
		if err := os.WriteFile(filepath.Join(sn.Dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.PutSnapshot(ctx, sn)
	orphan := filepath.Join(dir, "sn-orphan")
	_ = os.MkdirAll(orphan, 0o700)

	e, err := New(Config{Dir: dir, Backend: "qemu", Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.checker.Verify(sn.Dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("before the sweep: %v, want the no-manifest refusal", err)
	}
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.checker.Verify(sn.Dir); err != nil {
		t.Fatalf("after the sweep: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(sn.Dir, ManifestFile))
	var m Manifest
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil || len(m.Files) != 3 {
		t.Fatalf("manifest %+v, %v (want the three files, not the .tmp)", m, err)
	}
	if err := NewChecker().Verify(sn.Dir); err != nil {
		t.Fatalf("a later hostd: %v", err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan dir kept: %v", err)
	}
}

// TestSweepUnsyncedFork: a fork's snapshot is left to the page cache, with
// a marker naming the boot. After a hostd crash (the same boot) Sweep
// syncs and sums it; after the host restarted (another boot id) its files
// may be torn, and it stays without a manifest: refused, never booted.
func TestSweepUnsyncedFork(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		bootAfter string
		usable    bool
	}{
		{"hostd crashed", "boot-a", true},
		{"host restarted", "boot-b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			boot := filepath.Join(dir, "boot_id")
			old := bootIDPath
			bootIDPath = boot
			t.Cleanup(func() { bootIDPath = old })
			if err := os.WriteFile(boot, []byte("boot-a\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			st := &memStore{recs: map[string]Record{}}
			sn := Record{ID: "sn-f", Kind: KindFork, Dir: filepath.Join(dir, "sn-f"), Backend: "qemu"}
			if err := os.MkdirAll(sn.Dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for name, data := range map[string]string{LayerFile: "layer", "memory": "guest memory", "state": "devices"} {
				if err := os.WriteFile(filepath.Join(sn.Dir, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := markUnsynced(sn.Dir); err != nil {
				t.Fatal(err)
			}
			_ = st.PutSnapshot(ctx, sn)
			if err := os.WriteFile(boot, []byte(tc.bootAfter+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			e, err := New(Config{Dir: dir, Backend: "qemu", Store: st, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			err = NewChecker().Verify(sn.Dir)
			if tc.usable && err != nil {
				t.Fatalf("after a hostd crash: %v, want it usable", err)
			}
			if !tc.usable && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("after a host restart: %v, want it refused", err)
			}
		})
	}
}
