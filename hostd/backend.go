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
	if cfg.Driver != nil {
		return cfg.Driver, api.HealthInfo{VMM: cfg.Driver.Name(), Accel: "none"}, nil
	}
	if !validVMM[cfg.VMM] {
		return nil, api.HealthInfo{}, fmt.Errorf("hostd: vmm %q: want auto, qemu or cloud-hypervisor", cfg.VMM)
	}
	accel, err := parseAccel(cfg.Accel)
	if err != nil {
		return nil, api.HealthInfo{}, err
	}
	log := cfg.Logger
	if cfg.VMM == "cloud-hypervisor" || cfg.VMM == "auto" {
		d, err := tryCloudHypervisor(ctx, cfg)
		switch {
		case err == nil:
			return d, api.HealthInfo{VMM: d.Name(), Accel: string(vmm.AccelKVM)}, nil
		case cfg.VMM == "cloud-hypervisor":
			return nil, api.HealthInfo{}, fmt.Errorf("hostd: --vmm cloud-hypervisor: %w", err)
		default:
			log.Info("cloud-hypervisor not used", "reason", err)
		}
	}
	if accel == vmm.AccelAuto {
		if err := qemu.ProbeKVM(ctx, "", cfg.Kernel, cfg.Initramfs); err != nil {
			log.Info("kvm not used; falling back to tcg", "reason", err)
			accel = vmm.AccelTCG
		} else {
			accel = vmm.AccelKVM
		}
	}
	d, err := qemu.New(qemu.Options{Accel: accel, Logger: log, TBSizeMiB: cfg.TCGTBSizeMiB})
	if err != nil {
		return nil, api.HealthInfo{}, fmt.Errorf("hostd: %w", err)
	}
	return d, api.HealthInfo{VMM: d.Name(), Accel: string(d.Accel())}, nil
}

// tryCloudHypervisor returns a Cloud Hypervisor driver when its binary is
// installed and, for vmm=auto, when it really boots a guest under KVM.
func tryCloudHypervisor(ctx context.Context, cfg Config) (vmm.Driver, error) {
	bin, err := cloudhypervisor.Available()
	if err != nil {
		return nil, err
	}
	if cfg.VMM == "auto" {
		if err := cloudhypervisor.ProbeKVM(ctx, bin, cfg.Kernel, cfg.Initramfs); err != nil {
			return nil, err
		}
	}
	d, err := cloudhypervisor.New(cloudhypervisor.Options{Binary: bin, DataDirs: []string{cfg.DataDir, CacheDir()}, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return d, nil
}
