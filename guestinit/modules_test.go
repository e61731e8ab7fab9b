package guestinit

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// modulesOrder is kernel/fetch.sh's order of the guest's modules.
var modulesOrder = []string{"virtio_ring", "virtio", "virtio_mmio", "vsock", "vmw_vsock_virtio_transport_common",
	"vmw_vsock_virtio_transport", "virtio_blk", "failover", "net_failover", "virtio_net", "virtio_console",
	"virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "fuse"}

// fakeVM lays out an initramfs module dir and a sysfs with the given
// virtio device ids (as the kernel writes them) and PCI vendors.
func fakeVM(t *testing.T, virtio, pciVendors []string) (dir, sys string) {
	t.Helper()
	dir, sys = t.TempDir(), t.TempDir()
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range modulesOrder {
		write(filepath.Join(dir, m+".ko"), "elf")
	}
	write(filepath.Join(dir, "modules.order"), strings.Join(modulesOrder, ".ko\n")+".ko\n")
	for i, id := range virtio {
		write(filepath.Join(sys, "bus/virtio/devices", "virtio"+string(rune('0'+i)), "device"), id+"\n")
	}
	for i, v := range pciVendors {
		write(filepath.Join(sys, "bus/pci/devices", "0000:00:0"+string(rune('0'+i))+".0", "vendor"), v+"\n")
	}
	return dir, sys
}

func runLoader(t *testing.T, dir, sys string) (loaded, skipped []string) {
	t.Helper()
	l := modLoader{dir: dir, sys: sys, load: func(p string) error {
		loaded = append(loaded, strings.TrimSuffix(filepath.Base(p), ".ko"))
		return nil
	}}
	n, skipped, err := l.run()
	if err != nil || n != len(loaded) {
		t.Fatalf("run: %d, %v (loaded %v)", n, err, loaded)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("module files left behind: %v", ents)
	}
	return loaded, skipped
}

// TestModulesForTheDevicesThere: on QEMU's microvm (virtio-mmio: net, blk,
// console; no vsock, no PCI) the vsock and PCI modules are skipped; on
// Cloud Hypervisor (virtio PCI: vsock, blk, net) the console driver is;
// the buses come first, and each pass keeps modules.order's order.
func TestModulesForTheDevicesThere(t *testing.T) {
	cases := []struct {
		name        string
		virtio, pci []string
		load, skip  []string
	}{
		{"qemu microvm", []string{"0x0001", "0x0002", "0x0003"}, nil,
			[]string{"virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "failover", "net_failover", "virtio_net", "virtio_console", "fuse"},
			[]string{"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci"}},
		{"cloud hypervisor", []string{"0x0013", "0x0002", "0x0001"}, []string{"0x8086", "0x1af4"},
			[]string{"virtio_ring", "virtio", "virtio_mmio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
				"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport", "virtio_blk", "failover", "net_failover", "virtio_net", "fuse"},
			[]string{"virtio_console"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, sys := fakeVM(t, tc.virtio, tc.pci)
			loaded, skipped := runLoader(t, dir, sys)
			if !slices.Equal(loaded, tc.load) {
				t.Errorf("loaded %v\nwant %v", loaded, tc.load)
			}
			if !slices.Equal(skipped, tc.skip) {
				t.Errorf("skipped %v\nwant %v", skipped, tc.skip)
			}
		})
	}
}

// TestModulesWithoutAVirtioBus: a sysfs without the virtio bus (or one it
// cannot read) loads every driver, as before, and no PCI transport.
func TestModulesWithoutAVirtioBus(t *testing.T) {
	dir, _ := fakeVM(t, nil, nil)
	loaded, skipped := runLoader(t, dir, filepath.Join(t.TempDir(), "no-sysfs"))
	want := slices.DeleteFunc(slices.Clone(modulesOrder), func(m string) bool { return pciModules[m] })
	if !slices.Equal(loaded, want) || len(skipped) != 3 {
		t.Errorf("loaded %v, skipped %v\nwant %v and the PCI modules skipped", loaded, skipped, want)
	}
}

// TestModulesNeedingASkippedOne: a template's own module that needs a
// skipped driver (here vsock_loopback, which needs vsock) gets the skipped
// modules loaded first, and the boot goes on.
func TestModulesNeedingASkippedOne(t *testing.T) {
	dir, sys := fakeVM(t, []string{"0x0003"}, nil)
	order := append(slices.Clone(modulesOrder), "vsock_loopback")
	if err := os.WriteFile(filepath.Join(dir, "modules.order"), []byte(strings.Join(order, ".ko\n")+".ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vsock_loopback.ko"), []byte("elf"), 0o644); err != nil {
		t.Fatal(err)
	}
	var loaded []string
	l := modLoader{dir: dir, sys: sys, load: func(p string) error {
		name := strings.TrimSuffix(filepath.Base(p), ".ko")
		if name == "vsock_loopback" && !slices.Contains(loaded, "vsock") {
			return errors.New("vsock_loopback: unknown symbol vsock_core_register")
		}
		loaded = append(loaded, name)
		return nil
	}}
	if _, _, err := l.run(); err != nil {
		t.Fatal(err)
	}
	if i, j := slices.Index(loaded, "vsock"), slices.Index(loaded, "vsock_loopback"); i < 0 || j < i {
		t.Errorf("loaded %v: want vsock, then vsock_loopback", loaded)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("module files left behind: %v", ents)
	}
}
