package cloudhypervisor

import (
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// baseCmdline is the backend's own kernel arguments (the QEMU backend's,
// less what only TCG needs); Config.Cmdline follows. The serial port (ttyS0)
// is the console, written to Config.ConsoleLog. A panic reboots the guest at
// once, which Cloud Hypervisor reports on its event monitor.
const baseCmdline = "console=ttyS0 reboot=k panic=-1 quiet cryptomgr.notests 8250.nr_uarts=1 random.trust_cpu=on"

// guestCID is the guest's vsock CID. Hybrid vsock is private to each VMM
// process, so every VM can use the first CID that is not reserved.
const guestCID = 3

// vmConfig is the vm.create body for cfg. backing lists the disks' backing
// files, which the Landlock rules must allow.
func (d *Driver) vmConfig(cfg vmm.Config, p vmPaths, backing []string) chapi.VmConfig {
	cmdline := strings.TrimSpace(baseCmdline + " " + cfg.Cmdline)
	vc := chapi.VmConfig{
		Payload: chapi.PayloadConfig{Kernel: &cfg.Kernel, Cmdline: &cmdline},
		Cpus:    &chapi.CpusConfig{BootVcpus: cfg.VCPUs, MaxVcpus: cfg.VCPUs},
		// Memory stays private (shared: false): no device of vmm.Config is
		// a vhost-user backend, which is what needs shared guest memory.
		Memory:  &chapi.MemoryConfig{Size: int64(cfg.MemoryMiB) << 20},
		Vsock:   &chapi.VsockConfig{Cid: guestCID, Socket: p.vsock},
		Serial:  &chapi.SerialConfig{Mode: chapi.ConsoleModeFile, File: &cfg.ConsoleLog},
		Console: &chapi.ConsoleConfig{Mode: chapi.ConsoleModeOff},
	}
	if cfg.Initramfs != "" {
		vc.Payload.Initramfs = &cfg.Initramfs
	}
	if len(cfg.Disks) > 0 {
		disks := make([]chapi.DiskConfig, len(cfg.Disks))
		for i, disk := range cfg.Disks {
			disks[i] = diskConfig(i, disk)
		}
		vc.Disks = &disks
	}
	if d.landlock {
		rules := landlockRules(cfg, backing)
		vc.LandlockEnable = ptr(true)
		vc.LandlockRules = &rules
	}
	return vc
}

// diskConfig describes disk i. Its id and serial are explicit so that the
// guest (/dev/disk/by-id/virtio-<serial>) and a restored config name the
// same disk.
func diskConfig(i int, disk vmm.Disk) chapi.DiskConfig {
	dc := chapi.DiskConfig{
		Path:     ptr(disk.Path),
		Readonly: ptr(disk.ReadOnly),
		Id:       ptr(fmt.Sprintf("disk%d", i)),
		Serial:   ptr(fmt.Sprintf("agentbox-disk%d", i)),
		// Cloud Hypervisor's disk limiter takes reads and writes from one
		// bucket, like QEMU's bps-total.
		RateLimiterConfig: rateLimiter(disk.BpsTotal),
	}
	if disk.Raw {
		dc.ImageType = ptr(chapi.ImageTypeRaw)
	} else {
		// backing_files lets Cloud Hypervisor open the chain that
		// checkDisks has already checked.
		dc.ImageType = ptr(chapi.ImageTypeQcow2)
		dc.BackingFiles = ptr(true)
	}
	return dc
}

// netConfig describes the NIC of Config.Net (its tap goes in separately,
// as SCM_RIGHTS).
func netConfig(n *vmm.Net) chapi.NetConfig {
	nc := chapi.NetConfig{Id: ptr(netID), RateLimiterConfig: rateLimiter(n.BpsTotal)}
	if n.MAC != "" {
		nc.Mac = ptr(n.MAC)
	}
	return nc
}

// rateLimiter is a NIC's or disk's limiter for bps bytes per second (nil
// for none). Cloud Hypervisor gives each direction of a NIC its own bucket
// of this shape. The bucket holds 100 ms at the rate and at least 64 KiB (one GSO
// packet), the same burst hostd's tc uses; its refill time is the time the
// rate takes to fill it.
func rateLimiter(bps int64) *chapi.RateLimiterConfig {
	if bps <= 0 {
		return nil
	}
	size := max(bps/10, 64<<10)
	refill := max((size*1000+bps/2)/bps, 1)
	return &chapi.RateLimiterConfig{Bandwidth: &chapi.TokenBucket{Size: size, RefillTime: refill}}
}

// landlockRules grants what Cloud Hypervisor does not grant itself from the
// config: the VM's directory (snapshot staging, restore copy, vsock
// sockets) and the disks' backing files, read-only. The config's own paths
// (kernel, initramfs, disks, serial file, vsock socket) it adds itself.
func landlockRules(cfg vmm.Config, backing []string) []chapi.LandlockConfig {
	rules := []chapi.LandlockConfig{{Path: cfg.Dir, Access: "rw"}}
	for _, b := range backing {
		rules = append(rules, chapi.LandlockConfig{Path: b, Access: "r"})
	}
	return rules
}

func ptr[T any](v T) *T { return &v }
