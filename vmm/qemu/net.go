package qemu

import "github.com/agentbox/agentbox/vmm"

// tapFD is the tap's descriptor number in QEMU: the second of
// cmd.ExtraFiles (the first, fd 3, is the guest memory memfd).
const tapFD = "4"

// netArgs attaches the caller's tap as a virtio-net device on the microvm
// virtio-mmio bus. QEMU gets the open descriptor, never the device's name, so
// it needs no privileges and no access to the sandbox's network namespace.
func netArgs(n *vmm.Net) []string {
	return []string{
		"-netdev", "tap,id=net0,fd=" + tapFD,
		"-device", "virtio-net-device,netdev=net0,mac=" + n.MAC,
	}
}
