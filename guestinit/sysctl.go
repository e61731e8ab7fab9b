package guestinit

import (
	"errors"
	"os"
	"path/filepath"
)

// idleSysctls turn off the guest kernel's periodic housekeeping that a
// sandbox does not need. A restored guest runs what fell due while it was
// idle (deferrable work waits for the CPU to wake), so each of these ran in
// the wake of a restore or fork, on its one vCPU, and under TCG as code a
// new VMM translates first (~4 % of a fork's wake, fewer wake-ups when idle):
//   - kernel.watchdog: the soft and hard lockup detectors. A vCPU that the
//     host does not run for seconds is no lockup of the guest's.
//   - vm.stat_interval: per-CPU memory counters folded once a minute, not
//     once a second (/proc/vmstat and meminfo lag by at most those deltas).
//   - vm.compaction_proactiveness: no background compaction of a small VM's
//     memory; allocations still compact on demand.
var idleSysctls = []struct{ key, value string }{
	{"kernel/watchdog", "0"},
	{"vm/stat_interval", "60"},
	{"vm/compaction_proactiveness", "0"},
}

// setSysctls writes idleSysctls under procSys (/proc/sys); one it cannot
// set does not stop the others, and all failures are returned.
func setSysctls(procSys string) error {
	var errs []error
	for _, s := range idleSysctls {
		if err := os.WriteFile(filepath.Join(procSys, s.key), []byte(s.value+"\n"), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
