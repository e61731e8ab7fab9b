package qemu

import (
	"syscall"

	"github.com/agentbox/agentbox/vmm"
)

// seccomp is QEMU's -sandbox value for cfg. QEMU drops privileges (-runas)
// after it has installed its seccomp filter, so a filter that denies
// set*uid kills it with SIGSYS (QEMU 7.2 does, with elevateprivileges=deny
// and =children); with cfg.RunAs the filter allows them. Once QEMU runs as
// an unprivileged user those calls cannot regain root (it has no
// capabilities left, and spawn=deny keeps it from exec'ing a set-user-ID
// binary).
func seccomp(cfg vmm.Config) string {
	elevate := "deny"
	if cfg.RunAs != nil {
		elevate = "allow"
	}
	return "on,obsolete=deny,elevateprivileges=" + elevate + ",spawn=deny,resourcecontrol=deny"
}

// runAsArgs makes QEMU drop to cfg.RunAs (numeric uid:gid, so no user
// database lookup and only that one group) after opening its devices,
// disks, memory and sockets, and first chroot into cfg.Dir (-chroot: QEMU
// does it before the drop, and then holds no capability to leave it). An
// escaped QEMU then sees only its VM directory, where it can write its own
// overlays and nothing else. What QEMU opens after the drop is named
// relative to that directory (paths.go): the overlay of a snapshot's
// blockdev-snapshot-sync, and the frozen overlay under it, which QEMU
// reopens read-only by name. Every VMM outlives hostd by design (no
// parent-death signal, vmm.StartProcess), so the uid change costs nothing:
// the next hostd re-adopts it or its reaper stops it.
func runAsArgs(cfg vmm.Config) []string {
	if cfg.RunAs == nil {
		return nil
	}
	return []string{"-runas", cfg.RunAs.String(), "-chroot", cfg.Dir}
}

// jailAttr puts a jailed QEMU (cfg.RunAs) in a mount namespace of its own,
// a private copy of hostd's (Go's exec makes its propagation private), in
// which it then chroots: it sees no mount at all (its mountinfo is empty),
// mounts and unmounts hostd makes later never reach it, and none it could
// make would reach the host. The chroot, the drop and the seccomp filter
// are QEMU's own (runAsArgs, seccomp).
func jailAttr(cfg vmm.Config) *syscall.SysProcAttr {
	if cfg.RunAs == nil {
		return nil
	}
	return &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
}
