package qemu

// seccomp is QEMU's -sandbox value. QEMU drops privileges (-runas) after it
// has installed its seccomp filter, so a filter that denies set*uid kills it
// with SIGSYS (QEMU 7.2 does, with elevateprivileges=deny and =children);
// with RunAs the filter allows them. Once QEMU runs as an unprivileged user
// those calls cannot regain root (it has no capabilities left, and spawn=deny
// keeps it from exec'ing a set-user-ID binary).
func (d *Driver) seccomp() string {
	elevate := "deny"
	if d.runAs != "" {
		elevate = "allow"
	}
	return "on,obsolete=deny,elevateprivileges=" + elevate + ",spawn=deny,resourcecontrol=deny"
}

// runAsArgs makes QEMU drop to d.runAs after opening its devices, disks,
// memory and sockets. Files it opens later (the overlay of a snapshot's
// blockdev-snapshot-sync) must be the user's: the caller owns the VM's
// directory and overlays to it. Every VMM outlives hostd by design (no
// parent-death signal, vmm.StartProcess), so the uid change costs nothing:
// the next hostd re-adopts it or its reaper stops it.
func (d *Driver) runAsArgs() []string {
	if d.runAs == "" {
		return nil
	}
	return []string{"-runas", d.runAs}
}

// RunAs is the user QEMU drops to ("" = it stays root).
func (d *Driver) RunAs() string { return d.runAs }
