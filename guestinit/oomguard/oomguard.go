// Package oomguard is the guest's early-OOM policy. Without it a memory hog
// (`tail /dev/zero`) in a small guest thrashes for tens of seconds before
// the kernel's OOM killer acts, evicting the agent's own pages while it
// does, so the sandbox stops answering.
//
// Setup puts the user commands' cgroup (agent.ExecCgroup) under a memory
// limit that leaves the agent and the kernel a reserve: a hog fills its
// cgroup, not the guest, and the kernel's cgroup OOM killer ends it as
// soon as its cgroup is full (anonymous memory, no swap: nothing to
// reclaim). Watch then reports each kill, read from the kernel's log
// (/dev/kmsg), as an OOM event in the flight recorder's ring, with the
// killed process's name. Guard (pressure.go) kills earlier than the
// kernel: when the cgroup is at its memory.high and stalls on memory.
package oomguard

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Reserve bounds: the cgroup's limit is the guest's memory less an eighth
// of it, at least MinReserve and at most MaxReserve.
const (
	MinReserve = 64 << 20
	MaxReserve = 256 << 20
)

// ReserveFor is the memory kept outside the user commands' cgroup in a
// guest of total bytes.
func ReserveFor(total int64) int64 {
	return min(max(total/8, MinReserve), MaxReserve)
}

// Setup enables the memory controller below cgroupRoot, makes the cgroup
// dir (if needed), sets its memory.max to the guest's memory (from
// meminfo) less ReserveFor and its memory.high to HighFor that (the
// pressure guard's line, pressure.go). It returns the limit set.
func Setup(cgroupRoot, dir, meminfo string) (int64, error) {
	total, err := memTotal(meminfo)
	if err != nil {
		return 0, err
	}
	limit := total - ReserveFor(total)
	if limit <= 0 {
		return 0, fmt.Errorf("oomguard: %d bytes of memory leave no room for commands", total)
	}
	ctl := filepath.Join(cgroupRoot, "cgroup.subtree_control")
	if err := os.WriteFile(ctl, []byte("+memory"), 0); err != nil {
		return 0, fmt.Errorf("oomguard: enable the memory controller: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("oomguard: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		return 0, fmt.Errorf("oomguard: memory.max: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.high"), []byte(strconv.FormatInt(HighFor(limit), 10)), 0); err != nil {
		return 0, fmt.Errorf("oomguard: memory.high: %w", err)
	}
	// No swap in the guest today; should one appear, the hog must not
	// thrash through it either. (Absent without CONFIG_MEMCG_SWAP.)
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	return limit, nil
}

// memTotal reads MemTotal (bytes) from a /proc/meminfo.
func memTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("oomguard: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("oomguard: MemTotal: %w", err)
			}
			return kib << 10, nil
		}
	}
	return 0, errors.Join(errors.New("oomguard: no MemTotal in "+path), sc.Err())
}
