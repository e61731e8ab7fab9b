package guestinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The initramfs may carry a module tree for the running kernel,
// /lib/modules/<release> (kernel/ondemand.sh: overlay, bridge, netfilter):
// modules guestinit does not load at boot, so that only a guest that runs
// containers pays for them. guestinit makes that tree the root's
// /lib/modules/<release>, where the guest's modprobe (dockerd runs it) and
// the kernel's autoloading (which runs /sbin/modprobe) find it.
const ondemandStage = "/run/agentbox/modules"

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// stageOndemand, in the initramfs, binds its module tree for the running
// kernel onto /run/agentbox/modules (read-only), which moves into the new
// root with /run. It reports whether there was one.
func stageOndemand(release string) (bool, error) {
	src := filepath.Join("/lib/modules", release)
	if release == "" {
		return false, nil
	}
	if _, err := os.Stat(filepath.Join(src, "modules.dep")); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err := os.MkdirAll(ondemandStage, 0o755); err != nil {
		return false, err
	}
	if err := bindReadOnly(src, ondemandStage); err != nil {
		return false, err
	}
	return true, nil
}

// exposeOndemand, in the new root, binds the staged tree onto
// /lib/modules/<release> unless the root has its own tree there (an empty
// directory is the mount point an earlier boot made).
func exposeOndemand(release string) error {
	dst := filepath.Join("/lib/modules", release)
	if ents, err := os.ReadDir(dst); len(ents) > 0 || (err != nil && !errors.Is(err, os.ErrNotExist)) {
		return fmt.Errorf("%s exists in the root: kept, on-demand modules only in %s", dst, ondemandStage)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return bindReadOnly(ondemandStage, dst)
}

func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("read-only %s: %w", dst, err)
	}
	return nil
}
