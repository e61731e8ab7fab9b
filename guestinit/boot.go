package guestinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/u-root/u-root/pkg/mount"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

type mnt struct {
	src, target, fstype string
	flags               uintptr
	data                string
}

func mountAll(ms []mnt) error {
	for _, m := range ms {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.target, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}

const nosuidNodev = unix.MS_NOSUID | unix.MS_NODEV

// earlyMounts mounts what the initramfs needs.
func earlyMounts() error {
	return mountAll([]mnt{
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"proc", "/proc", "proc", nosuidNodev | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", nosuidNodev | unix.MS_NOEXEC, ""},
		{"tmpfs", "/run", "tmpfs", nosuidNodev, "mode=0755"},
	})
}

// lateMounts mounts what a Debian userland expects, inside the new root.
func lateMounts() error {
	return mountAll([]mnt{
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=620,ptmxmode=666"},
		{"tmpfs", "/dev/shm", "tmpfs", nosuidNodev, "mode=1777"},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", nosuidNodev | unix.MS_NOEXEC, ""},
	})
}

// openConsole makes /dev/console the process's stdio and returns it.
func openConsole() io.Writer {
	f, err := os.OpenFile("/dev/console", os.O_RDWR, 0)
	if err != nil {
		return os.Stderr
	}
	for fd := 0; fd <= 2; fd++ {
		_ = unix.Dup2(int(f.Fd()), fd)
	}
	return os.Stdout
}

// switchRoot mounts dev on /newroot and makes it the root, moving the
// pseudo-filesystems along. Unlike switch_root(8) it does not exec: this
// process stays PID 1, running from the memory its binary was loaded into.
func switchRoot(dev string) error {
	if err := waitFor(dev, 5*time.Second); err != nil {
		return err
	}
	const newRoot = "/newroot"
	if err := os.MkdirAll(newRoot, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dev, newRoot, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s: %w", dev, err)
	}
	for _, m := range []string{"/dev", "/proc", "/sys", "/run"} {
		target := filepath.Join(newRoot, m)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := mount.MoveMount(m, target); err != nil {
			return fmt.Errorf("move %s: %w", m, err)
		}
	}
	_ = os.Remove("/init") // free the initramfs copy; the running image stays mapped
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := mount.MoveMount(".", "/"); err != nil {
		return fmt.Errorf("move new root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

func waitFor(path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: %w", path, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func loopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}
