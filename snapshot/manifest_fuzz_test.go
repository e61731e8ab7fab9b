package snapshot

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzManifest feeds Verify any manifest.json next to a real snapshot file
// and a file outside the snapshot directory: it never panics, any failure
// wraps ErrCorrupt, and it accepts a manifest only when every file it
// names is a file of the directory whose content matches (never a path
// that leaves it).
func FuzzManifest(f *testing.F) {
	base := f.TempDir()
	dir := filepath.Join(base, "snap")
	if err := os.Mkdir(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte("device state"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "outside"), []byte("host secret"), 0o644); err != nil {
		f.Fatal(err)
	}
	good, err := Sums(dir, []string{"state"})
	if err != nil {
		f.Fatal(err)
	}
	out, err := Sum(filepath.Join(base, "outside"))
	if err != nil {
		f.Fatal(err)
	}
	for _, m := range []Manifest{good, {}, {Files: []FileSum{{Name: "../outside", Size: out.Size, SHA256: out.SHA256}}},
		{Files: []FileSum{{Name: "state", Size: -1, SHA256: good.Files[0].SHA256}}}, {Files: []FileSum{{Name: ""}}},
		{Files: []FileSum{{Name: dir + "/state", Size: good.Files[0].Size, SHA256: good.Files[0].SHA256}}}} {
		b, _ := json.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte("{"))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := NewChecker().Verify(dir)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify: %v does not wrap ErrCorrupt", err)
			}
			return
		}
		var m Manifest
		if json.Unmarshal(data, &m) != nil {
			t.Fatalf("accepted a manifest that does not decode: %q", data)
		}
		for _, fs := range m.Files {
			if fs.Name != "state" && fs.Name != ManifestFile {
				t.Fatalf("accepted a manifest naming %q (%q)", fs.Name, data)
			}
		}
	})
}
