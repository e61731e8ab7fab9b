package cloudhypervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
)

// landlockMinABI is the Landlock ABI that Cloud Hypervisor demands (as a
// hard requirement) when a VM's config enables Landlock: ABI v3, Linux 6.2.
const landlockMinABI = 3

// landlockABI returns the kernel's Landlock ABI version, or 0 when Landlock
// is not built in or not enabled at boot.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// userfaultfd(2) constants from include/uapi/linux/userfaultfd.h.
const (
	uffdAPI           = 0xAA
	uffdioAPI         = 0xc018aa3f // _IOWR(0xAA, 0x3F, struct uffdio_api)
	userfaultfdIOCNew = 0xaa00     // _IO(0xAA, 0x00) on /dev/userfaultfd
)

// userfaultfdWorks reports whether this process can open a userfaultfd that
// also handles kernel-mode faults and complete the API handshake, the way
// Cloud Hypervisor's on-demand restore opens one: /dev/userfaultfd first,
// then the syscall. It runs as hostd's user, which is the VMM's user.
func userfaultfdWorks() bool {
	fd := openUserfaultfd()
	if fd < 0 {
		return false
	}
	defer unix.Close(fd)
	api := struct{ api, features, ioctls uint64 }{api: uffdAPI}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uffdioAPI, uintptr(unsafe.Pointer(&api)))
	return errno == 0
}

func openUserfaultfd() int {
	const flags = unix.O_CLOEXEC | unix.O_NONBLOCK
	if dev, err := os.OpenFile("/dev/userfaultfd", os.O_RDWR, 0); err == nil {
		fd, _, errno := unix.Syscall(unix.SYS_IOCTL, dev.Fd(), userfaultfdIOCNew, flags)
		dev.Close()
		if errno == 0 {
			return int(fd)
		}
	}
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, flags, 0, 0)
	if errno != 0 {
		return -1
	}
	return int(fd)
}

// ProbeTimeout bounds a probe boot. Working KVM boots the probe in well
// under a second; nested KVM that crawls takes tens of seconds.
const ProbeTimeout = 8 * time.Second

// ErrKVMUnusable is returned by ProbeKVM when KVM cannot boot a guest here.
var ErrKVMUnusable = errors.New("cloudhypervisor: kvm unusable")

// ProbeKVM boots kernel and initramfs in guestinit's probe mode under the
// cloud-hypervisor binary (as New finds it when binary is empty) and reports
// whether the guest printed its marker within ProbeTimeout. /dev/kvm
// existing proves nothing: on nested hosts a stock kernel dies or crawls.
func ProbeKVM(ctx context.Context, binary, kernel, initramfs string) error {
	bin, err := findBinary(binary)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "agentbox-ch-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	console := filepath.Join(dir, "console")
	cmd := exec.Command(bin,
		"--kernel", kernel, "--initramfs", initramfs,
		"--cmdline", "console=ttyS0 reboot=k panic=-1 quiet agentbox.probe=1",
		"--cpus", "boot=1", "--memory", "size=128M",
		"--serial", "file="+console, "--console", "off", "--seccomp", "true")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: start %s: %v", ErrKVMUnusable, bin, err)
	}
	if err := vmm.ProbeProcess(ctx, cmd, console, channel.ProbeMarker, ProbeTimeout); err != nil {
		return fmt.Errorf("%w: %v: %s", ErrKVMUnusable, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}
