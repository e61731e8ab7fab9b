package sandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestRotateConsole: a console log over its cap is moved to console.log.1
// and emptied, and a writer that appends (as the VMM does) goes on at the
// start of the emptied log, leaving no hole.
func TestRotateConsole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	w, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	old := bytes.Repeat([]byte("boot line\n"), 200)
	w.Write(old)
	if rotated, err := rotateConsole(path, 4096); err != nil || rotated {
		t.Fatalf("under the cap: rotated %v, %v", rotated, err)
	}
	w.Write(old) // 4000 bytes: over the cap now
	if rotated, err := rotateConsole(path, 3000); err != nil || !rotated {
		t.Fatalf("over the cap: rotated %v, %v", rotated, err)
	}
	w.Write([]byte("after\n"))
	if got, _ := os.ReadFile(path); string(got) != "after\n" {
		t.Fatalf("log after rotation: %q", got)
	}
	if got, _ := os.ReadFile(path + ".1"); len(got) != 2*len(old) {
		t.Fatalf("console.log.1 holds %d bytes, want %d", len(got), 2*len(old))
	}
}
