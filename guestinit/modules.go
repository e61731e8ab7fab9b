package guestinit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/u-root/u-root/pkg/kmodule"
	"golang.org/x/sys/unix"
)

// The modules that drive one kind of virtio device, by the device's virtio
// id (the virtio spec's 5.x numbers): each is loaded only when the VM has
// such a device. Under TCG a module costs its load (relocations, symbols,
// init) at emulated speed, and the QEMU backend has no vsock, as Cloud
// Hypervisor has no virtio-serial.
var virtioDrivers = map[string]int{
	"failover": 1, "net_failover": 1, "virtio_net": 1,
	"virtio_blk":     2,
	"virtio_console": 3,
	"vsock":          19, "vmw_vsock_virtio_transport_common": 19, "vmw_vsock_virtio_transport": 19,
}

// busModules are the virtio core and its buses, loaded before the rest so
// that the devices are on the bus when the drivers are chosen; the PCI
// transport (pciModules) only when a virtio PCI device is there (Cloud
// Hypervisor; QEMU's microvm has virtio-mmio).
var (
	busModules = map[string]bool{"virtio_ring": true, "virtio": true, "virtio_mmio": true}
	pciModules = map[string]bool{"virtio_pci_modern_dev": true, "virtio_pci_legacy_dev": true, "virtio_pci": true}
)

// virtioVendor is the PCI vendor id of virtio devices.
const virtioVendor = "0x1af4"

// modLoader loads the initramfs's modules: first the virtio core and
// buses, then, in modules.order's order, every other module but the
// drivers of virtio devices the VM does not have. Should a module fail to
// load once some were skipped (a template's own module that needs one of
// them), the skipped ones are loaded and it is tried again. Each file is
// removed at the end, to free initramfs memory.
type modLoader struct {
	dir  string                  // the modules and their modules.order
	sys  string                  // sysfs
	load func(path string) error // finit_module
}

// loadModules loads the modules of dir/modules.order that this VM needs
// and returns how many it loaded and which it skipped.
func loadModules(dir string) (int, []string, error) {
	return modLoader{dir: dir, sys: "/sys", load: loadModule}.run()
}

func (l modLoader) run() (int, []string, error) {
	order, err := l.order()
	if err != nil || order == nil {
		return 0, nil, err
	}
	defer func() {
		for _, name := range order {
			os.Remove(filepath.Join(l.dir, name+".ko"))
		}
	}()
	done := map[string]bool{}
	load := func(name string) error {
		if err := l.load(filepath.Join(l.dir, name+".ko")); err != nil {
			return err
		}
		done[name] = true
		return nil
	}
	pci := l.hasVirtioPCI()
	for _, name := range order {
		if busModules[name] || (pci && pciModules[name]) {
			if err := load(name); err != nil {
				return len(done), nil, err
			}
		}
	}
	ids, known := l.virtioIDs()
	var skipped []string
	for _, name := range order {
		id, driver := virtioDrivers[name]
		switch {
		case done[name]:
		case pciModules[name] || (driver && known && !ids[id]):
			skipped = append(skipped, name)
		default:
			err := load(name)
			if err != nil && len(skipped) > 0 {
				err = l.loadSkipped(load, skipped, name)
				skipped = nil
			}
			if err != nil {
				return len(done), skipped, err
			}
		}
	}
	return len(done), skipped, nil
}

// loadSkipped loads the skipped modules after name failed to load without
// them, then name again.
func (l modLoader) loadSkipped(load func(string) error, skipped []string, name string) error {
	for _, s := range skipped {
		if err := load(s); err != nil {
			return err
		}
	}
	return load(name)
}

// order is the module names of dir/modules.order (nil without one).
func (l modLoader) order() ([]string, error) {
	f, err := os.Open(filepath.Join(l.dir, "modules.order"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		names = append(names, strings.TrimSuffix(filepath.Base(line), ".ko"))
	}
	return names, sc.Err()
}

// hasVirtioPCI reports whether a PCI device of the virtio vendor is there.
func (l modLoader) hasVirtioPCI() bool {
	vendors, _ := filepath.Glob(filepath.Join(l.sys, "bus/pci/devices/*/vendor"))
	for _, v := range vendors {
		if b, err := os.ReadFile(v); err == nil && strings.TrimSpace(string(b)) == virtioVendor {
			return true
		}
	}
	return false
}

// virtioIDs is the set of virtio device ids on the VM's virtio bus; known
// is false when the bus cannot be read, and then every driver is loaded.
func (l modLoader) virtioIDs() (ids map[int]bool, known bool) {
	devs, err := os.ReadDir(filepath.Join(l.sys, "bus/virtio/devices"))
	if err != nil {
		return nil, false
	}
	ids = map[int]bool{}
	for _, d := range devs {
		b, err := os.ReadFile(filepath.Join(l.sys, "bus/virtio/devices", d.Name(), "device"))
		if err != nil {
			return nil, false
		}
		id, err := strconv.ParseInt(strings.TrimSpace(string(b)), 0, 32)
		if err != nil {
			return nil, false
		}
		ids[int(id)] = true
	}
	return ids, true
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := kmodule.FileInit(f, "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}
