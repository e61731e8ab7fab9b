package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestSumIgnoresLayout(t *testing.T) {
	dir := t.TempDir()
	sparse, dense := filepath.Join(dir, "sparse"), filepath.Join(dir, "dense")
	f, _ := os.Create(sparse)
	f.Truncate(8 << 20)
	f.WriteAt([]byte("x"), 3<<20)
	f.Close()
	b := make([]byte, 8<<20)
	b[3<<20] = 'x'
	os.WriteFile(dense, b, 0o644)
	s1, err1 := Sum(sparse)
	s2, err2 := Sum(dense)
	if err1 != nil || err2 != nil || s1.SHA256 != s2.SHA256 {
		t.Errorf("same content, holes or zeros: got %s and %s (%v %v)", s1.SHA256, s2.SHA256, err1, err2)
	}
}

func TestManifestDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	mem := filepath.Join(dir, "memory")
	f, _ := os.Create(mem)
	f.Truncate(64 << 20) // mostly a hole
	f.WriteAt([]byte("guest data"), 32<<20)
	f.Close()
	os.WriteFile(filepath.Join(dir, "state"), []byte("device state"), 0o644)
	m, err := WriteManifest(dir, []string{"memory", "state"})
	if err != nil {
		t.Fatal(err)
	}
	c := NewChecker()
	if err := c.Verify(dir); err != nil {
		t.Fatalf("fresh snapshot: %v", err)
	}
	c.Trust(dir, m)
	tests := []struct {
		name   string
		damage func()
	}{
		{"bit flip in the data", func() {
			f, _ := os.OpenFile(mem, os.O_WRONLY, 0)
			f.WriteAt([]byte("Guest data"), 32<<20)
			f.Close()
		}},
		{"data where a hole was", func() {
			f, _ := os.OpenFile(mem, os.O_WRONLY, 0)
			f.WriteAt([]byte{1}, 1<<20)
			f.Close()
		}},
		{"truncated", func() { os.Truncate(filepath.Join(dir, "state"), 3) }},
		{"missing", func() { os.Remove(filepath.Join(dir, "state")) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.damage()
			if err := NewChecker().Verify(dir); !errors.Is(err, ErrCorrupt) {
				t.Errorf("fresh checker: got %v, want ErrCorrupt", err)
			}
			if err := c.Verify(dir); !errors.Is(err, ErrCorrupt) {
				t.Errorf("checker that had trusted it: got %v, want ErrCorrupt", err)
			}
		})
	}
}

// A restore that verifies a fresh snapshot while its manifest is being
// written (in the background, by the capture) accepts it whichever side
// of the write it lands on.
func TestVerifyWhileTheManifestLands(t *testing.T) {
	for i := range 300 {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "state"), []byte(fmt.Sprint("state ", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		c := NewChecker()
		names := []string{"state"}
		if err := c.Fresh(dir, names); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			m, err := Sums(dir, names)
			if err == nil {
				err = m.Write(dir)
			}
			if err != nil {
				t.Error(err)
				return
			}
			c.Trust(dir, m)
		}()
		for {
			if err := c.Verify(dir); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			select {
			case <-done:
			default:
				continue
			}
			break
		}
	}
}
