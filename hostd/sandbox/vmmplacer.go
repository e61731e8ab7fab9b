package sandbox

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/vmm"
)

// vmmPlacer places the sandboxes' VMM processes (user, cgroup, limits) and
// records each one's identity in its sandbox directory (vmstate.json), so
// that a later hostd finds it: to adopt it, or to stop it.
type vmmPlacer struct {
	backend string  // the driver's name
	cgroups Cgroups // nil: no cgroups
	nets    *netAttachments
	log     *slog.Logger
	// held is the ledger of the cgroups this hostd holds (groups.go).
	held cgroupLedger
}

// place fills cfg's per-sandbox limits: the VMM's user (jail.go), the
// disk throttle, the network rate (set on the tap here), and the hook that
// moves the VMM process into its cgroup as soon as it exists.
func (v *vmmPlacer) place(cfg vmm.Config, b *runningVM) (vmm.Config, error) {
	var err error
	if cfg.RunAs, err = runAsOf(b.dir); err != nil {
		return cfg, err
	}
	for i := range cfg.Disks {
		cfg.Disks[i].BpsTotal = b.limits.DiskBps
	}
	if err := v.nets.limit(&cfg, b.id, b.limits.NetBps); err != nil {
		return cfg, err
	}
	if v.cgroups == nil {
		v.record(&cfg) // the VMM's identity on disk (adopt.go)
		return cfg, nil
	}
	g, release, err := v.held.hold(b.id, func() (*cgroup.Group, error) {
		return v.cgroups.Create(b.id, cgroup.Limits{CPUs: b.limits.CPUQuota,
			MemoryBytes: int64(hostMemoryCap(b.limits.HostMemoryMiB, cfg.MemoryMiB)) << 20, Background: b.background})
	})
	if err != nil {
		return cfg, err
	}
	b.cgroup, b.unhold = g, release
	cfg.Started = g.Add
	v.record(&cfg)
	return cfg, nil
}

// hostMemoryCap is the memory cap of a VMM's cgroup in MiB: the
// sandbox's host_memory_mib, or by default its guest memory and a quarter
// more, plus 1536 MiB for QEMU itself and its TCG translation cache (1 GiB
// at most, QEMU's default tb-size; a guest building with Docker fills
// it, and a cap of guest + 25 % + 512 MiB had its VMM killed). With
// a cap on every VMM, one guest's VMM meets its own cgroup's limit (its
// page cache reclaimed first) before the host's OOM killer.
func hostMemoryCap(limitMiB, guestMiB int) int {
	if limitMiB > 0 {
		return limitMiB
	}
	return guestMiB + guestMiB/4 + 1536
}

// record wraps cfg.Started so that the VMM's identity is on disk before
// any guest runs: a hostd killed from then on leaves a VMM the next one
// can find.
func (v *vmmPlacer) record(cfg *vmm.Config) {
	started, dir, backend := cfg.Started, cfg.Dir, v.backend
	cfg.Started = func(pid int) error {
		if started != nil {
			if err := started(pid); err != nil {
				return err
			}
		}
		p, err := vmm.Identify(pid)
		if err != nil {
			p = vmm.Process{PID: pid} // a fake VMM: adopt rewrites it
		}
		// A hostd killed here leaves a VMM that only where it works
		// (unrecordedIn) tells; the next hostd stops it at start.
		fault.Point("vmm:spawned")
		return writeVMState(dir, vmState{Backend: backend, Process: p})
	}
}

// recorded returns the VMM recorded in dir, if any. Whether it still
// runs as the same process (pid and start time) is for Driver.Adopt and
// kill to check; with cgroups, a VMM that is not in sandbox id's group
// is not its VMM at all.
func (v *vmmPlacer) recorded(id, dir string) (vmm.Process, bool) {
	st, err := readVMState(dir)
	if err != nil || st.Backend != v.backend {
		return vmm.Process{}, false
	}
	if pl, ok := v.cgroups.(procLister); ok && st.Process.Alive() {
		pids, err := pl.Procs(id)
		if err != nil || !slices.Contains(pids, st.Process.PID) {
			v.log.Warn("recorded vmm is not in the sandbox's cgroup; not adopting it", "sandbox_id", id, "vm_pid", st.Process.PID)
			return st.Process, false
		}
	}
	return st.Process, true
}

// kill stops the VMM recorded in dir, if it still runs, by its pidfd
// (never a name): SIGKILL, then a bounded wait for its exit.
func (v *vmmPlacer) kill(id, dir string) {
	if st, err := readVMState(dir); err == nil {
		v.killProcess(id, st.Process)
	}
	// After the recorded one has exited, so that it is not found twice.
	for _, p := range unrecordedIn(dir) {
		v.killProcess(id, p)
	}
	_ = os.Remove(filepath.Join(dir, vmStateFile))
}

// killProcess sends SIGKILL to p by its pidfd and waits (bounded) for its
// exit; a process gone already is left.
func (v *vmmPlacer) killProcess(id string, p vmm.Process) {
	h, err := vmm.OpenProcess(p)
	if err != nil {
		return // gone already
	}
	defer h.Close()
	v.log.Warn("stopping a vmm that no running sandbox owns", "sandbox_id", id, "vm_pid", p.PID)
	_ = h.Signal(syscall.SIGKILL)
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		v.log.Error("vmm did not exit after SIGKILL", "sandbox_id", id, "vm_pid", p.PID)
	}
}

// unrecordedIn finds the processes that work in sandbox directory dir (a
// VMM runs there, and a jailed one is chrooted there): a VMM that a hostd
// killed between its spawn and the record of its identity (cfg.Started)
// is found by where hostd started it, never by its name.
func unrecordedIn(dir string) []vmm.Process {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []vmm.Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, _ := os.Readlink("/proc/" + e.Name() + "/cwd")
		root, _ := os.Readlink("/proc/" + e.Name() + "/root")
		if cwd != dir && root != dir {
			continue
		}
		if p, err := vmm.Identify(pid); err == nil {
			out = append(out, p)
		}
	}
	return out
}
