package mounts

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/guestinit/mount"
	"github.com/agentbox/agentbox/internal/waitfor"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// listener hands the host's streams to the guest's Service, as the router
// does in the guest.
type listener struct{ c chan net.Conn }

func (l listener) Accept() (net.Conn, error) {
	c, ok := <-l.c
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l listener) Close() error   { return nil }
func (l listener) Addr() net.Addr { return &net.UnixAddr{Name: "test"} }

// harness runs the guest side (guestinit/mount's FUSE filesystems) on this
// host, connected to a Set by in-memory pipes: the real protocol and the
// real kernel FUSE, without a VM. It needs root and /dev/fuse.
type harness struct {
	t     *testing.T
	set   *Set
	l     listener
	guest string // where the guest's mounts go
	ctx   context.Context
	wg    sync.WaitGroup
}

func newHarness(t *testing.T, specs []Spec) *harness {
	t.Helper()
	return newHarnessWith(t, Config{}, specs)
}

func newHarnessWith(t *testing.T, cfg Config, specs []Spec) *harness {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("FUSE mounts need root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	set, err := cfg.Open(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, set: set, l: listener{c: make(chan net.Conn)}, ctx: ctx}
	svc := mount.NewService(slog.New(slog.DiscardHandler))
	go svc.Serve(h.l) //nolint:errcheck // returns when the listener closes
	t.Cleanup(func() {
		for _, sp := range specs {
			_ = syscall.Unmount(sp.Path, syscall.MNT_DETACH)
		}
		cancel()
		h.wg.Wait()
		set.Close()
	})
	return h
}

// connect opens a new host stream, as hostd does after every restore, and
// waits for the guest's Ready.
func (h *harness) connect() (hostEnd net.Conn) {
	h.t.Helper()
	host, guest := net.Pipe()
	ready := make(chan map[string]string, 1)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		_ = h.set.Serve(h.ctx, host, func(errs map[string]string) { ready <- errs })
	}()
	h.l.c <- guest
	select {
	case errs := <-ready:
		if msg := fmt.Sprint(errs); len(errs) > 0 && (strings.Contains(msg, "not permitted") || strings.Contains(msg, "no such device")) {
			h.t.Skipf("this host cannot mount FUSE: %v", errs)
		} else if len(errs) > 0 {
			h.t.Fatalf("guest could not mount: %v", errs)
		}
	case <-time.After(20 * time.Second):
		h.t.Fatal("no Ready from the guest")
	}
	return host
}

func TestFUSEHostDir(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gdir := t.TempDir()
	rw, ro, nolinks := filepath.Join(gdir, "rw"), filepath.Join(gdir, "ro"), filepath.Join(gdir, "nolinks")
	h := newHarness(t, []Spec{{Type: TypeHost, Source: src, Path: rw, AllowSymlinks: true}, {Type: TypeHost, Source: src, Path: ro, ReadOnly: true},
		{Type: TypeHost, Source: src, Path: nolinks}})
	h.connect()

	if b, err := os.ReadFile(filepath.Join(ro, "hello.txt")); err != nil || string(b) != "hello from the host\n" {
		t.Fatalf("read through the mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "nope"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to the read-only mount: %v, want EROFS", err)
	}
	// A big file in chunks, both ways.
	big := make([]byte, 3<<20+123)
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(rw, "sub", "big"), big, 0o644); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("write under a missing dir: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(rw, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rw, "sub", "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "sub", "big")); !bytes.Equal(b, big) {
		t.Fatalf("host sees %d bytes, want the %d written", len(b), len(big))
	}
	if b, _ := os.ReadFile(filepath.Join(ro, "sub", "big")); !bytes.Equal(b, big) {
		t.Fatalf("guest reads back %d bytes, want %d", len(b), len(big))
	}
	// Rename, truncate, symlink, remove.
	if err := os.Rename(filepath.Join(rw, "sub", "big"), filepath.Join(rw, "big2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(rw, "big2"), 10); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(src, "big2")); err != nil || fi.Size() != 10 {
		t.Fatalf("after truncate: %v, %v", fi, err)
	}
	if err := os.Symlink("big2", filepath.Join(rw, "link")); err != nil {
		t.Fatal(err)
	}
	if tgt, err := os.Readlink(filepath.Join(rw, "link")); err != nil || tgt != "big2" {
		t.Fatalf("readlink: %q, %v", tgt, err)
	}
	// No link that a host program would follow out of the mount, and none
	// at all where the mount does not allow them.
	for _, l := range []struct{ target, at string }{
		{"/etc/passwd", filepath.Join(rw, "x")}, {"../../etc", filepath.Join(rw, "x")}, {"big2", filepath.Join(nolinks, "x")},
	} {
		if err := os.Symlink(l.target, l.at); !errors.Is(err, syscall.EPERM) {
			t.Errorf("ln -s %s %s: got %v, want EPERM", l.target, l.at, err)
		}
	}
	for _, p := range []string{"link", "big2", "sub"} {
		if err := os.Remove(filepath.Join(rw, p)); err != nil {
			t.Fatal(err)
		}
	}
	// A guest that sends paths itself gets nothing outside the source:
	// not through a host symlink, not with "..", not absolute.
	if err := os.Symlink("/etc", filepath.Join(src, "escape")); err != nil {
		t.Fatal(err)
	}
	svc := &service{set: h.set, sem: make(chan struct{}, 1)}
	for _, p := range []string{"escape/passwd", "../etc/passwd", "/etc/passwd", "a/../../etc/passwd"} {
		r, _ := svc.Read(context.Background(), &agentv1.MountReadRequest{Mount: "m0", Path: p, Size: 100})
		if r.Errno == 0 || len(r.Data) > 0 {
			t.Errorf("read of %q: errno %d, %d bytes", p, r.Errno, len(r.Data))
		}
	}
	if r, _ := svc.Read(context.Background(), &agentv1.MountReadRequest{Mount: "m0", Path: "hello.txt", Size: MaxIO + 1}); r.Errno != int32(syscall.EINVAL) {
		t.Errorf("oversized read: errno %d", r.Errno)
	}
	if r, _ := svc.Remove(context.Background(), &agentv1.MountRemoveRequest{Mount: "m1", Path: "hello.txt"}); r.Errno != int32(syscall.EROFS) {
		t.Errorf("remove on the read-only mount: errno %d", r.Errno)
	}
}

// A new host stream (a restore, fork or resume) takes over from a broken
// one, and the mount keeps working; a listing of many entries comes back
// whole.
func TestFUSEReconnect(t *testing.T) {
	src := t.TempDir()
	const n = 3000
	for i := range n {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mnt := filepath.Join(t.TempDir(), "m")
	h := newHarness(t, []Spec{{Type: TypeHost, Source: src, Path: mnt}})
	first := h.connect()
	names := func() []string {
		des, err := os.ReadDir(mnt)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range des {
			out = append(out, d.Name())
		}
		sort.Strings(out)
		return out
	}
	if got := names(); len(got) != n || got[0] != "f00000" || got[n-1] != fmt.Sprintf("f%05d", n-1) {
		t.Fatalf("listed %d entries, want %d", len(got), n)
	}
	first.Close() // the channel resets
	done := make(chan error, 1)
	go func() { // an op during the outage waits for the next stream
		f, err := os.Open(filepath.Join(mnt, "f00001"))
		if err == nil {
			_, err = io.ReadAll(f)
			f.Close()
		}
		done <- err
	}()
	waitfor.Blocked(t, "mount.(*Service).current") // the op waits for a stream
	h.connect()
	if err := <-done; err != nil {
		t.Fatalf("op across the reconnect: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "after"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "after")); err != nil {
		t.Fatal(err)
	}
}
