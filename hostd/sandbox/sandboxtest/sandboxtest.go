// Package sandboxtest builds sandbox managers over the fake driver
// (vmm/vmmtest) for unit tests of what drives one: no VM and no guest
// assets, only qemu-img for the sandboxes' overlays. The sandbox package's
// external tests and hostd's unit tests share it (its internal tests
// cannot import it: they have their own newEnv).
package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// ErrNoQemuImg is Options' error on a host without qemu-img.
var ErrNoQemuImg = errors.New("sandboxtest: qemu-img is needed for overlays (Debian's qemu-utils; ci/install-deps.sh installs it)")

// Options returns the options of a manager on data dir data over driver d
// and store st: a blank 64 MiB qcow2 base image and a kernel file (which
// the fake driver never reads) in data, made unless they are there already
// (so that a manager started again on data finds the same ones), a 20 s
// boot timeout, and a discarded log. It needs no *testing.T: a child
// process of a test (a hostd killed at a fault point) uses it too.
func Options(data string, d vmm.Driver, st sandbox.Store) (sandbox.Options, error) {
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		return sandbox.Options{}, ErrNoQemuImg
	}
	base := filepath.Join(data, "base.qcow2")
	if _, err := os.Stat(base); errors.Is(err, os.ErrNotExist) {
		if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
			return sandbox.Options{}, fmt.Errorf("sandboxtest: qemu-img: %w: %s", err, out)
		}
	}
	kernel := filepath.Join(data, "vmlinux")
	if _, err := os.Stat(kernel); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(kernel, []byte("not a kernel: the fake driver boots nothing"), 0o644); err != nil {
			return sandbox.Options{}, fmt.Errorf("sandboxtest: %w", err)
		}
	}
	return sandbox.Options{Driver: d, Store: st, DataDir: data, Kernel: kernel, BaseImage: base,
		BootTimeout: 20 * time.Second, Logger: slog.New(slog.DiscardHandler)}, nil
}

// Env is a manager over a fake driver, on a data dir of its own.
type Env struct {
	M    *sandbox.Manager
	D    *vmmtest.FakeDriver
	St   *store.Store
	Data string
	// Opts are M's options: New(Opts) is the next hostd's manager on the
	// same data dir.
	Opts sandbox.Options
}

// New starts a manager (Recover done) over a new fake driver, on a fresh
// data dir under t.TempDir() with its own store, after applying tweak to
// its options. It skips t on a host without qemu-img. The store is closed
// when the test ends; the manager is the test's to end (Close, Release,
// or hostd's shutdown), before then.
func New(t testing.TB, tweak ...func(*sandbox.Options)) *Env {
	t.Helper()
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d := vmmtest.NewFakeDriver(vmmtest.FakeOptions{})
	opts, err := Options(data, d, st)
	if errors.Is(err, ErrNoQemuImg) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, tw := range tweak {
		tw(&opts)
	}
	m, err := sandbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	return &Env{M: m, D: d, St: st, Data: data, Opts: opts}
}

// Reopen starts another manager on opts, as a next hostd on the same data
// directory would, and recovers it. It is closed when the test ends.
func Reopen(t testing.TB, opts sandbox.Options) *sandbox.Manager {
	t.Helper()
	ctx := context.Background()
	m, err := sandbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}
