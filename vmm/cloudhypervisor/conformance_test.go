package cloudhypervisor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestConformance holds the driver to vmmtest's contract, the release and
// adoption of a VMM included, against the fake cloud-hypervisor, whose
// guest is a vmmtest.Guest (the real guestinit agent, in the fake's
// process). What a real cloud-hypervisor does is realch_test.go's.
func TestConformance(t *testing.T) {
	vmmtest.RunContract(t, vmmtest.Target{
		NewDriver: func(t *testing.T) vmm.Driver {
			d, _ := fakeDriver(t, envFakeGuest+"=agent")
			return d
		},
		Config: fakeGuestConfig,
	})
}

// fakeGuestConfig is a Target.Config: a VM in a short directory of its own
// (for the sockets), with a kernel and an initramfs file and a qcow2 root
// disk over base, if given.
func fakeGuestConfig(t testing.TB, id, base string) vmm.Config {
	t.Helper()
	dir := vmmtest.ShortTempDir(t)
	for _, f := range []string{"vmlinux", "initramfs"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec := qcowSpec{}
	if base != "" {
		spec = qcowSpec{backing: base, backingFormat: "qcow2"}
	}
	root := writeQcow2(t, filepath.Join(dir, "root.qcow2"), spec)
	return vmm.Config{
		ID: id, Dir: dir, Kernel: filepath.Join(dir, "vmlinux"), Initramfs: filepath.Join(dir, "initramfs"),
		Cmdline: "agentbox.hostname=" + id, VCPUs: 1, MemoryMiB: 256,
		Disks: []vmm.Disk{{Path: root}}, ConsoleLog: filepath.Join(dir, "console.log"),
	}
}
