package qemu

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmm"
)

func TestRunAsArgs(t *testing.T) {
	d := &Driver{accel: vmm.AccelTCG, tscKHz: 1000000}
	cfg := vmm.Config{ID: "sb-1", Dir: "/d", Kernel: "/k", VCPUs: 1, MemoryMiB: 128, ConsoleLog: "/d/console.log"}
	root := d.args(cfg, sharedMemory(128))
	if slices.Contains(root, "-runas") || slices.Contains(root, "-chroot") || !slices.Contains(root, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny") {
		t.Errorf("a VM without RunAs: %q, want no -runas and set*id denied", root)
	}
	cfg.RunAs = &vmm.User{UID: 2000000007, GID: 2000000007}
	a := d.args(cfg, sharedMemory(128))
	i := slices.Index(a, "-runas")
	if i < 0 || a[i+1] != "2000000007:2000000007" {
		t.Errorf("RunAs: %q, want -runas 2000000007:2000000007", a)
	}
	if i := slices.Index(a, "-chroot"); i < 0 || a[i+1] != "/d" {
		t.Errorf("RunAs: %q, want -chroot /d", a)
	}
	if j := slices.Index(a, "-sandbox"); j < 0 || !strings.Contains(a[j+1], "elevateprivileges=allow") || !strings.Contains(a[j+1], "spawn=deny") {
		t.Errorf("RunAs: %q, want set*id allowed for the drop and spawn denied", a)
	}
	for _, u := range []vmm.User{{UID: 0, GID: 5}, {UID: 5, GID: 0}} {
		cfg.RunAs = &u
		if err := cfg.Validate(); err == nil {
			t.Errorf("RunAs %v validated", u)
		}
	}
}
