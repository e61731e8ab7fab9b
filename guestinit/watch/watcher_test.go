package watch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// fakeSessions attributes every pid to one session.
type fakeSessions string

func (f fakeSessions) SessionOf(int) string { return string(f) }

// startWatcher marks the filesystem holding dir (the whole filesystem: the
// events are filtered to dir by the caller) and runs a watcher on it.
func startWatcher(t *testing.T, dir string) (*Watcher, *Ring) {
	t.Helper()
	ring := NewRing(RingSize)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := New(Config{Paths: []string{dir}, Sessions: fakeSessions("s1"), DpkgStatus: filepath.Join(dir, "dpkg-status"), Log: log}, ring)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) {
		t.Skipf("fanotify unavailable here (needs root and CONFIG_FANOTIFY): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	go w.Run()
	t.Cleanup(func() { w.Close(true) })
	return w, ring
}

// eventsUnder returns the ring's events on paths under dir, as
// "op path [old] [dir]" lines, and the file events themselves.
func eventsUnder(r *Ring, dir string) ([]string, []*agentv1.GuestEvent) {
	b := r.Next(context.Background(), 0, 0, RingSize)
	var lines []string
	var evs []*agentv1.GuestEvent
	rel := func(p string) string { return strings.TrimPrefix(p, dir) }
	for _, ev := range b.Events {
		if f := ev.GetFile(); f != nil && strings.HasPrefix(f.Path, dir+"/") {
			line := f.Op + " " + rel(f.Path)
			if f.OldPath != "" {
				line += " from " + rel(f.OldPath)
			}
			if f.Dir {
				line += " dir"
			}
			lines = append(lines, line)
			evs = append(evs, ev)
		}
		if p := ev.GetPackage(); p != nil && strings.HasPrefix(p.Path, dir+"/") {
			lines = append(lines, fmt.Sprintf("package %s %s %s %s", p.Manager, p.Action, p.Name, p.Version))
			evs = append(evs, ev)
		}
	}
	return lines, evs
}

// TestWatcherFileOps runs file operations in one process, quicker than the
// watcher reads them, so fanotify merges some (the create and the delete of
// d into one event): the order of the result is reconstructed.
func TestWatcherFileOps(t *testing.T) {
	dir := t.TempDir()
	w, ring := startWatcher(t, dir)

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hi\n"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "d"), 0o755))
	must(os.Rename(filepath.Join(dir, "a.txt"), filepath.Join(dir, "d", "b.txt")))
	f, err := os.OpenFile(filepath.Join(dir, "d", "b.txt"), os.O_WRONLY|os.O_APPEND, 0)
	must(err)
	_, err = f.WriteString("more\n")
	must(err)
	must(f.Close())
	must(os.WriteFile(filepath.Join(dir, "c.txt"), []byte("hi\n"), 0o644))
	must(os.Remove(filepath.Join(dir, "d", "b.txt")))
	must(os.Remove(filepath.Join(dir, "d")))
	w.Flush()

	got, evs := eventsUnder(ring, dir)
	want := []string{
		"created /a.txt",
		"created /d dir",
		"renamed /d/b.txt from /a.txt",
		"modified /d/b.txt",
		"created /c.txt",
		"deleted /d/b.txt",
		"deleted /d dir",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	sum := sha256.Sum256([]byte("hi\n"))
	if f := evs[4].GetFile(); f.Size != 3 || f.Sha256 != hex.EncodeToString(sum[:]) {
		t.Errorf("got size %d sha256 %s, want 3 and %x", f.Size, f.Sha256, sum)
	}
	for _, ev := range evs {
		if ev.ExecId != "s1" || ev.Pid != int32(os.Getpid()) {
			t.Errorf("event %d: got exec %q pid %d, want s1 and %d", ev.Seq, ev.ExecId, ev.Pid, os.Getpid())
		}
	}
}

// TestWatcherDirectoryMoved checks that entries of a moved directory are
// named by where it was when they changed, and by its new place after.
func TestWatcherDirectoryMoved(t *testing.T) {
	dir := t.TempDir()
	w, ring := startWatcher(t, dir)
	for _, step := range []func() error{
		func() error { return os.MkdirAll(filepath.Join(dir, "a", "sub"), 0o755) },
		func() error { return os.WriteFile(filepath.Join(dir, "a", "sub", "x"), []byte("x"), 0o644) },
		func() error { w.Flush(); return nil }, // the cache now knows a and a/sub
		func() error { return os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")) },
		func() error { return os.WriteFile(filepath.Join(dir, "b", "sub", "y"), []byte("y"), 0o644) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	got, _ := eventsUnder(ring, dir)
	want := []string{"created /a dir", "created /a/sub dir", "created /a/sub/x", "renamed /b from /a dir", "created /b/sub/y"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWatcherIgnoresOwnPID(t *testing.T) {
	dir := t.TempDir()
	ring := NewRing(16)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := New(Config{Paths: []string{dir}, IgnorePID: os.Getpid(), Log: log}, ring)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) {
		t.Skipf("fanotify unavailable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	go w.Run()
	t.Cleanup(func() { w.Close(true) })
	if err := os.WriteFile(filepath.Join(dir, "mine"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if got, _ := eventsUnder(ring, dir); len(got) != 0 {
		t.Errorf("got %q, want no events of the own pid", got)
	}
}

func TestWatcherPackages(t *testing.T) {
	dir := t.TempDir()
	w, ring := startWatcher(t, dir)
	info := filepath.Join(dir, "lib", "site-packages", "demo-0.1.dist-info")
	if err := os.MkdirAll(info, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info, "METADATA"), []byte("Metadata-Version: 2.1\nName: demo\nVersion: 0.1\n\nbody\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nm := filepath.Join(dir, "node_modules", "@acme", "left-pad")
	if err := os.MkdirAll(nm, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nm, "package.json"), []byte(`{"name":"@acme/left-pad","version":"1.3.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(info); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	got, _ := eventsUnder(ring, dir)
	var pkgs []string
	for _, l := range got {
		if strings.HasPrefix(l, "package ") {
			pkgs = append(pkgs, l)
		}
	}
	want := []string{"package pip installed demo 0.1", "package npm installed @acme/left-pad 1.3.0", "package pip removed demo 0.1"}
	if strings.Join(pkgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s\nall:\n%s", strings.Join(pkgs, "\n"), strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

// testWriter sends the watcher's log to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// TestWatcherAttribAndOpenWrites: a chmod or chown alone, and writes by a
// process that keeps the file open, are reported as modified: the writes
// once while the file stays open, and again at its close.
func TestWatcherAttribAndOpenWrites(t *testing.T) {
	dir := t.TempDir()
	w, ring := startWatcher(t, dir)
	p := filepath.Join(dir, "f")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(p, []byte("a"), 0o644))
	w.Flush()
	must(os.Chmod(p, 0o600))
	w.Flush()
	must(os.Chown(p, 1, 1))
	w.Flush()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	must(err)
	defer f.Close()
	_, err = f.WriteString("b")
	must(err)
	w.Flush()
	_, err = f.WriteString("c") // still open, already reported
	must(err)
	w.Flush()
	got, evs := eventsUnder(ring, dir)
	want := []string{"created /f", "modified /f", "modified /f", "modified /f"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	sum := sha256.Sum256([]byte("ab"))
	if e := evs[3].GetFile(); e.Size != 2 || e.Sha256 != hex.EncodeToString(sum[:]) {
		t.Errorf("the open write: size %d sha256 %s, want 2 and %x", e.Size, e.Sha256, sum)
	}
	must(f.Close())
	w.Flush()
	if got, _ := eventsUnder(ring, dir); len(got) != 5 || got[4] != "modified /f" {
		t.Errorf("after the close: %q, want one more modified", got)
	}
}
