package guestinit

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBindFile binds a tmpfs-style copy over a file in a mount namespace of
// the test's own (a locked thread that ends with the test): the target
// reads the copy, a write to the target lands in the copy, and the disk's
// file is untouched.
func TestBindFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("binding needs root")
	}
	dir := t.TempDir()
	target, src := filepath.Join(dir, "hostname"), filepath.Join(dir, "copy")
	if err := os.WriteFile(target, []byte("disk\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread and its namespace end with this goroutine
		errc <- inPrivateMounts(func() error {
			if err := bindFile(target, src, nil); err != nil {
				return err
			}
			defer unix.Unmount(target, 0)
			if got, _ := os.ReadFile(target); string(got) != "disk\n" {
				t.Errorf("bound file reads %q, want the disk's content", got)
			}
			if err := os.WriteFile(target, []byte("sb-1\n"), 0o444); err != nil {
				return err
			}
			if got, _ := os.ReadFile(src); string(got) != "sb-1\n" {
				t.Errorf("copy reads %q after a write to the target, want sb-1", got)
			}
			if st, err := os.Stat(src); err != nil || st.Mode().Perm() != 0o640 {
				t.Errorf("copy's mode: %v, %v; want the target's 0640", st.Mode(), err)
			}
			return nil
		})
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "disk\n" {
		t.Errorf("disk file reads %q after the bind, want it untouched", got)
	}
}

func TestBindFileRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	err := bindFile(dir, filepath.Join(t.TempDir(), "copy"), []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("bind over a directory: %v, want a clear refusal", err)
	}
}

// inPrivateMounts runs f in a new mount namespace of the calling (locked)
// thread, with no mount propagating back to the host's.
func inPrivateMounts(f func() error) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	return f()
}
