// Package vmmtest is the conformance suite that every vmm.Driver backend
// passes: Run boots one real VM from the guest assets and checks the
// driver's contract on it (agent channel, pause/resume, stop, cleanup).
package vmmtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/vmm"
)

// Assets are the guest boot files the kernel/ and images/ scripts build.
type Assets struct {
	Kernel    string
	Initramfs string
	BaseImage string
}

// CacheDir is AGENTBOX_CACHE or /var/cache/agentbox.
func CacheDir() string {
	if d := os.Getenv("AGENTBOX_CACHE"); d != "" {
		return d
	}
	return "/var/cache/agentbox"
}

// FindAssets returns the cached guest assets, failing the test with what to
// run when they are missing (a VM test never passes without a VM). Every VM
// test calls it, so it also ties the VMMs this test binary starts to it
// (vmm.DieWithHost): a test that crashes or times out leaves no VM behind.
// A hostd the test runs as a separate process is not affected.
func FindAssets(t testing.TB) Assets {
	t.Helper()
	vmm.DieWithHost()
	c := CacheDir()
	a := Assets{
		Kernel:    filepath.Join(c, "kernel", "vmlinux"),
		Initramfs: filepath.Join(c, "initramfs.cpio"),
		BaseImage: filepath.Join(c, "images", "base.qcow2"),
	}
	if p := os.Getenv("AGENTBOX_INITRAMFS"); p != "" {
		a.Initramfs = p
	} else if p := checkoutInitramfs(); p != "" {
		a.Initramfs = p
	}
	for _, p := range []string{a.Kernel, a.Initramfs, a.BaseImage} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("guest asset missing: %v (run `make assets` first)", err)
		}
	}
	return a
}

// checkoutInitramfs finds bin/initramfs.cpio at the root of the module
// the test runs in: the initramfs that `make initramfs` built from this
// checkout's guestinit.
func checkoutInitramfs() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "initramfs.cpio")
			if _, err := os.Stat(p); err == nil {
				return p
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// ShortTempDir returns a fresh directory with a short path (unix socket
// paths are limited to 108 bytes), removed when the test ends.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ab-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

var osReadFile = os.ReadFile
