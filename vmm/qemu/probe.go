package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
)

// ProbeTimeout bounds a KVM probe boot. Working KVM boots the probe in well
// under a second; nested KVM that crawls takes tens of seconds, and counts as
// not working.
const ProbeTimeout = 8 * time.Second

// ErrKVMUnusable is returned by ProbeKVM when KVM cannot boot a guest here.
var ErrKVMUnusable = errors.New("qemu: kvm unusable")

// ProbeKVM boots kernel+initramfs under KVM in probe mode and reports whether
// guestinit got to print its marker within ProbeTimeout. /dev/kvm existing
// proves nothing: on nested-paravirtual hosts a stock kernel dies or crawls.
func ProbeKVM(ctx context.Context, binary, kernel, initramfs string) error {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return fmt.Errorf("%w: %v", ErrKVMUnusable, err)
	}
	if binary == "" {
		binary = "qemu-system-x86_64"
	}
	khz, err := HostTSCkHz()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "agentbox-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	console := filepath.Join(dir, "console")
	args := []string{
		"-machine", "microvm,x-option-roms=off,rtc=on", "-accel", "kvm", "-cpu", "host",
		"-m", "128M", "-nodefaults", "-no-user-config", "-nographic", "-display", "none", "-no-reboot",
		"-kernel", kernel, "-initrd", initramfs,
		"-append", fmt.Sprintf("console=ttyS0 reboot=t panic=-1 quiet cryptomgr.notests tsc_early_khz=%d agentbox.probe=1", khz),
		"-chardev", "file,id=console,path=" + console, "-serial", "chardev:console",
	}
	cmd := exec.Command(binary, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := vmm.StartTiedProcess(cmd); err != nil {
		return fmt.Errorf("%w: start: %v", ErrKVMUnusable, err)
	}
	if err := vmm.ProbeProcess(ctx, cmd, console, channel.ProbeMarker, ProbeTimeout); err != nil {
		return fmt.Errorf("%w: %v: %s", ErrKVMUnusable, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// ChooseAccel returns the accelerator to use: the operator's choice when
// given, else KVM when ProbeKVM passes, else TCG. The error explains a
// fallback to TCG (it is informational, not a failure).
func ChooseAccel(ctx context.Context, want vmm.Accel, binary, kernel, initramfs string) (vmm.Accel, error) {
	if want != vmm.AccelAuto {
		return want, nil
	}
	if err := ProbeKVM(ctx, binary, kernel, initramfs); err != nil {
		return vmm.AccelTCG, err
	}
	return vmm.AccelKVM, nil
}
