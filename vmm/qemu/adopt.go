package qemu

import (
	"context"

	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/vmm"
)

// Adopt reconnects to a QEMU that an earlier hostd started for cfg (see
// vmm.Driver): it opens the process by pidfd (checking its start time),
// connects QMP again (QEMU's QMP server takes a new client once the old one
// is gone) and finds the guest memory memfd among QEMU's descriptors, for
// later snapshots. The agent channel is connected by the first Dial, whose
// reset marker starts a fresh session in the guest. On failure QEMU is left
// running.
func (d *Driver) Adopt(ctx context.Context, cfg vmm.Config, p vmm.Process) (vmm.VM, error) {
	if cfg.ID == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("%w: adopt needs ID and Dir", vmm.ErrInvalidConfig)
	}
	h, err := vmm.OpenProcess(p)
	if err != nil {
		return nil, fmt.Errorf("qemu: adopt %s: %w", cfg.ID, err)
	}
	if !isQEMUOf(p.PID, cfg.ID) {
		h.Close()
		return nil, fmt.Errorf("qemu: adopt %s: pid %d is not its qemu: %w", cfg.ID, p.PID, vmm.ErrNotRunning)
	}
	vm := newAdoptedVM(h, cfg, d.log)
	if vm.mem, err = openMemfd(p.PID, cfg.ID); err != nil {
		vm.closeConns()
		return nil, err
	}
	if err := vm.connectQMP(ctx); err != nil {
		vm.closeConns()
		return nil, fmt.Errorf("qemu: adopt %s: %w", cfg.ID, err)
	}
	d.log.Info("vm adopted", "sandbox_id", cfg.ID, "vm_pid", p.PID)
	return vm, nil
}

// isQEMUOf reports whether pid's command line is a QEMU of VM id (the
// -name argument every launch sets): a check on top of the pid and start
// time, not a way to find a VMM.
func isQEMUOf(pid int, id string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-name" && args[i+1] == "agentbox-"+id {
			return true
		}
	}
	return false
}

// openMemfd opens the guest memory memfd that QEMU pid holds, or returns
// nil when it has none (a VM restored from a memory file maps it privately).
func openMemfd(pid int, id string) (*os.File, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("qemu: adopt %s: %w", id, err)
	}
	want := "/memfd:agentbox-" + id
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(link, want) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("qemu: adopt %s: open memfd: %w", id, err)
		}
		return f, nil
	}
	return nil, nil
}
