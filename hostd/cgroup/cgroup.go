// Package cgroup gives each VMM process its own cgroup, with a CPU quota and
// a host memory cap, and reads back what the process consumed. Groups live
// under /agentbox/<instance>/<sandbox id> in every controller hierarchy, so
// several hostds on one host (tests run many) never touch each other's
// groups, and a hostd can find and remove the orphans of its own instance.
//
// It works on both cgroup layouts: the unified (v2) hierarchy, and the
// legacy or hybrid layout (v1 controllers, as on the machines this project
// is built on, whose v2 mount has no cpu or memory controller). The files
// are written by github.com/containerd/cgroups/v3.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cgroups "github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ErrUnavailable is returned by New when the host has no usable cgroup
// hierarchy with the cpu and memory controllers.
var ErrUnavailable = errors.New("cgroup: no usable cgroup hierarchy")

// unifiedRoot is where the v2 hierarchy is mounted on a unified host.
const unifiedRoot = "/sys/fs/cgroup"

// cpuPeriod is the CFS period the quota is expressed in (100 ms).
const cpuPeriod = 100_000

// Limits are the caps of one group. Zero values mean no cap.
type Limits struct {
	// CPUs is the CPU quota in CPUs: 0.5 lets the group run half of one
	// CPU's time (cpu.max "50000 100000", or cfs_quota_us on v1).
	CPUs float64
	// MemoryBytes caps the group's memory (memory.max, or
	// memory.limit_in_bytes on v1).
	MemoryBytes int64
	// Background gives the group the least CPU weight (cpu.shares 2 on
	// v1, cpu.weight 1 on v2), so its processes run on the CPU time that
	// groups of the default weight leave: work done ahead (a warm pool's
	// restore) yields to work someone waits for.
	Background bool
}

// The CPU weights of a background group and of a default one (the
// kernel's default: cpu.shares 1024 on v1, cpu.weight 100 on v2).
const (
	backgroundShares, defaultShares uint64 = 2, 1024
	backgroundWeight, defaultWeight uint64 = 1, 100
)

// Stats is what a group has consumed.
type Stats struct {
	// CPUSeconds is the CPU time used, user and system.
	CPUSeconds float64
	// MemoryBytes is the memory charged now; MemoryPeakBytes the most
	// charged at once (0 where the kernel does not track it).
	MemoryBytes, MemoryPeakBytes uint64
}

// Manager creates the groups of one hostd instance.
type Manager struct {
	parent string // "/agentbox/<instance>"
	v2     bool
}

// New returns the manager of instance's groups. It fails with
// ErrUnavailable where no hierarchy has the cpu and memory controllers.
func New(instance string) (*Manager, error) {
	if instance == "" || strings.ContainsAny(instance, "/.") {
		return nil, fmt.Errorf("cgroup: bad instance name %q", instance)
	}
	m := &Manager{parent: "/agentbox/" + instance}
	switch cgroups.Mode() {
	case cgroups.Unified:
		m.v2 = true
		ctrls, err := os.ReadFile(filepath.Join(unifiedRoot, "cgroup.controllers"))
		if err != nil || !strings.Contains(string(ctrls), "cpu") || !strings.Contains(string(ctrls), "memory") {
			return nil, fmt.Errorf("%w: the v2 hierarchy lacks cpu or memory (%q)", ErrUnavailable, strings.TrimSpace(string(ctrls)))
		}
	case cgroups.Legacy, cgroups.Hybrid:
		if _, err := os.Stat(filepath.Join(v1Root, "memory")); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	default:
		return nil, ErrUnavailable
	}
	return m, nil
}

// Version is 1 or 2, the layout in use.
func (m *Manager) Version() int {
	if m.v2 {
		return 2
	}
	return 1
}

// Parent is the instance's group path, relative to the hierarchy roots.
func (m *Manager) Parent() string { return m.parent }

func (m *Manager) path(id string) string { return m.parent + "/" + id }

// Group is one VMM process's cgroup.
type Group struct {
	id string
	v1 cgroup1.Cgroup
	v2 *cgroup2.Manager
}

// Create makes the group of sandbox id with limits l (replacing a leftover
// group of the same id).
func (m *Manager) Create(id string, l Limits) (*Group, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, fmt.Errorf("cgroup: bad group name %q", id)
	}
	_ = m.Remove(id)
	g := &Group{id: id}
	var err error
	if m.v2 {
		g.v2, err = cgroup2.NewManager(unifiedRoot, m.path(id), v2Resources(l))
	} else {
		g.v1, err = cgroup1.New(cgroup1.StaticPath(m.path(id)), v1Resources(l))
	}
	if err != nil {
		// A limit the kernel refused leaves the directories made before
		// it (v1 makes one per hierarchy): remove them all.
		return nil, errors.Join(fmt.Errorf("cgroup: create %s: %w", m.path(id), err), m.Remove(id))
	}
	return g, nil
}

func v2Resources(l Limits) *cgroup2.Resources {
	r := &cgroup2.Resources{}
	if l.CPUs > 0 {
		q, p := quota(l.CPUs), uint64(cpuPeriod)
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&q, &p)}
	}
	if l.Background {
		if r.CPU == nil {
			r.CPU = &cgroup2.CPU{}
		}
		r.CPU.Weight = ptr(backgroundWeight)
	}
	if l.MemoryBytes > 0 {
		r.Memory = &cgroup2.Memory{Max: &l.MemoryBytes}
	}
	return r
}

func v1Resources(l Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.CPUs > 0 {
		q, p := quota(l.CPUs), uint64(cpuPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	if l.Background {
		if r.CPU == nil {
			r.CPU = &specs.LinuxCPU{}
		}
		r.CPU.Shares = ptr(backgroundShares)
	}
	if l.MemoryBytes > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &l.MemoryBytes}
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// quota is cpus as microseconds per cpuPeriod (at least 1 ms, the kernel's
// minimum).
func quota(cpus float64) int64 { return max(int64(cpus*cpuPeriod), 1000) }

// Add moves process pid (all its threads) into the group.
func (g *Group) Add(pid int) error {
	var err error
	if g.v2 != nil {
		err = g.v2.AddProc(uint64(pid))
	} else {
		err = g.v1.Add(cgroup1.Process{Pid: pid})
	}
	if err != nil {
		return fmt.Errorf("cgroup: add pid %d to %s: %w", pid, g.id, err)
	}
	return nil
}

// SetBackground gives the group the background CPU weight (on) or the
// default one (see Limits.Background).
func (g *Group) SetBackground(on bool) error {
	var err error
	if g.v2 != nil {
		w := defaultWeight
		if on {
			w = backgroundWeight
		}
		err = g.v2.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{Weight: &w}})
	} else {
		s := defaultShares
		if on {
			s = backgroundShares
		}
		err = g.v1.Update(&specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &s}})
	}
	if err != nil {
		return fmt.Errorf("cgroup: set the CPU weight of %s: %w", g.id, err)
	}
	return nil
}

// Stats reads what the group's processes have consumed.
func (g *Group) Stats() (Stats, error) {
	if g.v2 != nil {
		st, err := g.v2.Stat()
		if err != nil {
			return Stats{}, fmt.Errorf("cgroup: stat %s: %w", g.id, err)
		}
		return Stats{CPUSeconds: float64(st.GetCPU().GetUsageUsec()) / 1e6,
			MemoryBytes: st.GetMemory().GetUsage(), MemoryPeakBytes: st.GetMemory().GetMaxUsage()}, nil
	}
	st, err := g.v1.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return Stats{}, fmt.Errorf("cgroup: stat %s: %w", g.id, err)
	}
	return Stats{CPUSeconds: float64(st.GetCPU().GetUsage().GetTotal()) / 1e9,
		MemoryBytes: st.GetMemory().GetUsage().GetUsage(), MemoryPeakBytes: st.GetMemory().GetUsage().GetMax()}, nil
}

// Delete removes the group; its processes must have exited.
func (g *Group) Delete() error {
	var err error
	if g.v2 != nil {
		err = g.v2.Delete()
	} else {
		err = g.v1.Delete()
	}
	if err != nil {
		return fmt.Errorf("cgroup: delete %s: %w", g.id, err)
	}
	return nil
}

// Load opens the existing group of sandbox id (a hostd that restarted takes
// back the group of a VMM that outlived its predecessor).
func (m *Manager) Load(id string) (*Group, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, fmt.Errorf("cgroup: bad group name %q", id)
	}
	g := &Group{id: id}
	var err error
	if m.v2 {
		if _, err = os.Stat(filepath.Join(unifiedRoot, m.path(id))); err == nil {
			g.v2, err = cgroup2.Load(m.path(id), cgroup2.WithMountpoint(unifiedRoot))
		}
	} else {
		if _, err = os.Stat(filepath.Join(v1Root, "memory", m.path(id))); err == nil {
			g.v1, err = cgroup1.Load(cgroup1.StaticPath(m.path(id)))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: load %s: %w", m.path(id), err)
	}
	return g, nil
}

// Remove deletes the group of id if it exists.
func (m *Manager) Remove(id string) error {
	if m.v2 {
		if _, err := os.Stat(filepath.Join(unifiedRoot, m.path(id))); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		g, err := cgroup2.Load(m.path(id), cgroup2.WithMountpoint(unifiedRoot))
		if err != nil {
			return fmt.Errorf("cgroup: load %s: %w", m.path(id), err)
		}
		return (&Group{id: id, v2: g}).Delete()
	}
	var errs []error
	if _, err := os.Stat(filepath.Join(v1Root, "memory", m.path(id))); err == nil {
		g, err := cgroup1.Load(cgroup1.StaticPath(m.path(id)))
		if err == nil {
			err = (&Group{id: id, v1: g}).Delete()
		}
		errs = append(errs, err)
	}
	// What a half-made group left in the other hierarchies.
	hs, _ := v1Hierarchies()
	for _, h := range hs {
		errs = append(errs, removeDir(filepath.Join(h, m.path(id))))
	}
	return errors.Join(errs...)
}

// v1Hierarchies are the mounted v1 hierarchies' roots, symlinks (cpu ->
// cpu,cpuacct) left out.
func v1Hierarchies() ([]string, error) {
	ents, err := os.ReadDir(v1Root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(v1Root, e.Name()))
		}
	}
	return out, nil
}

// List returns the ids of the instance's groups that exist on the host.
// On v1 a group is listed if any hierarchy has it (a half-made group may
// lack the memory one).
func (m *Manager) List() ([]string, error) {
	dirs := []string{filepath.Join(unifiedRoot, m.parent)}
	if !m.v2 {
		hs, err := v1Hierarchies()
		if err != nil {
			return nil, fmt.Errorf("cgroup: list %s: %w", m.parent, err)
		}
		dirs = dirs[:0]
		for _, h := range hs {
			dirs = append(dirs, filepath.Join(h, m.parent))
		}
	}
	seen := map[string]bool{}
	var ids []string
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: list %s: %w", m.parent, err)
		}
		for _, e := range ents {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				ids = append(ids, e.Name())
			}
		}
	}
	return ids, nil
}

// Close removes the instance's (empty) parent group.
func (m *Manager) Close() error {
	ids, err := m.List()
	if err != nil || len(ids) > 0 {
		return errors.Join(err, fmt.Errorf("cgroup: %s still has groups %v", m.parent, ids))
	}
	if m.v2 {
		return removeDir(filepath.Join(unifiedRoot, m.parent))
	}
	ents, err := os.ReadDir(v1Root)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, removeDir(filepath.Join(v1Root, e.Name(), m.parent)))
	}
	return errors.Join(errs...)
}

func removeDir(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}

// v1Root is where the legacy hierarchies are mounted.
const v1Root = "/sys/fs/cgroup"

// Procs lists the processes in the group of id.
func (m *Manager) Procs(id string) ([]int, error) {
	p := filepath.Join(unifiedRoot, m.path(id), "cgroup.procs")
	if !m.v2 {
		p = filepath.Join(v1Root, "memory", m.path(id), "cgroup.procs")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
