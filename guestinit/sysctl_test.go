package guestinit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each sysctl is written; one that is missing is reported and does not stop
// the rest.
func TestSetSysctls(t *testing.T) {
	dir := t.TempDir()
	for _, s := range idleSysctls[1:] { // the first is missing
		p := filepath.Join(dir, s.key)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err := setSysctls(dir)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), idleSysctls[0].key) {
		t.Errorf("err %v, want the missing %s", err, idleSysctls[0].key)
	}
	for _, s := range idleSysctls[1:] {
		if b, err := os.ReadFile(filepath.Join(dir, s.key)); err != nil || string(b) != s.value+"\n" {
			t.Errorf("%s: %q, %v; want %q", s.key, b, err, s.value)
		}
	}
}
