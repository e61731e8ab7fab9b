package hostd

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor"
	"github.com/agentbox/agentbox/vmm/qemu"
)

// chooseDriver builds the VMM driver that cfg.VMM names. auto picks Cloud
// Hypervisor when its binary exists and KVM really boots a guest, and QEMU
// otherwise; QEMU's accelerator is probed the same way unless cfg.Accel says.
func chooseDriver(ctx context.Context, cfg Config) (vmm.Driver, api.HealthInfo, error) {
	if !validVMM[cfg.VMM] {
		return nil, api.HealthInfo{}, fmt.Errorf("hostd: vmm %q: want auto, qemu or cloud-hypervisor", cfg.VMM)
	}
	accel, err := parseAccel(cfg.Accel)
	if err != nil {
		return nil, api.HealthInfo{}, err
	}
	log := cfg.Logger
	var kvmErr error
	kvmProbed := false
	probe := func() error {
		if !kvmProbed {
			kvmErr = qemu.ProbeKVM(ctx, "", cfg.Kernel, cfg.Initramfs)
			kvmProbed = true
		}
		return kvmErr
	}
	if cfg.VMM == "cloud-hypervisor" || cfg.VMM == "auto" {
		_, chErr := cloudhypervisor.Available()
		switch {
		case chErr == nil && (cfg.VMM == "cloud-hypervisor" || probe() == nil):
			d, err := cloudhypervisor.New(cloudhypervisor.Options{DataDirs: []string{cfg.DataDir, CacheDir()}, Logger: log})
			if err != nil {
				return nil, api.HealthInfo{}, fmt.Errorf("hostd: %w", err)
			}
			return d, api.HealthInfo{VMM: d.Name(), Accel: string(vmm.AccelKVM)}, nil
		case cfg.VMM == "cloud-hypervisor":
			return nil, api.HealthInfo{}, fmt.Errorf("hostd: --vmm cloud-hypervisor: %w", chErr)
		case chErr != nil:
			log.Info("cloud-hypervisor not used", "reason", chErr)
		default:
			log.Info("cloud-hypervisor not used", "reason", kvmErr)
		}
	}
	if accel == vmm.AccelAuto {
		if err := probe(); err != nil {
			log.Info("kvm not used; falling back to tcg", "reason", err)
			accel = vmm.AccelTCG
		} else {
			accel = vmm.AccelKVM
		}
	}
	d, err := qemu.New(qemu.Options{Accel: accel, Logger: log})
	if err != nil {
		return nil, api.HealthInfo{}, fmt.Errorf("hostd: %w", err)
	}
	return d, api.HealthInfo{VMM: d.Name(), Accel: string(d.Accel())}, nil
}
