package watch

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkWatcherFiles is the watcher's cost per file written and removed
// (run with -cpuprofile to see where it goes).
func BenchmarkWatcherFiles(b *testing.B) {
	dir := b.TempDir()
	ring := NewRing(RingSize)
	w, err := New(Config{Paths: []string{dir}, Sessions: fakeSessions("s1"), DpkgStatus: filepath.Join(dir, "dpkg-status"),
		Log: slog.New(slog.DiscardHandler)}, ring)
	if err != nil {
		b.Skip(err)
	}
	go w.Run()
	defer w.Close(true)
	b.ResetTimer()
	for i := range b.N {
		p := filepath.Join(dir, "f"+strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(strconv.Itoa(i)), 0o644); err != nil {
			b.Fatal(err)
		}
		os.Remove(p)
		if i%100 == 99 {
			w.Flush()
		}
	}
	w.Flush()
}
