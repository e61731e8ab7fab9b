package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/hostd/store"
)

// Limits are a sandbox's resource limits and lifecycle options (R11, R12),
// fixed at create time. Zero values take hostd's defaults.
type Limits struct {
	// CPUQuota is the host CPU time the VMM process may use, in CPUs
	// (0.5 = half a CPU), enforced by its cgroup (cpu.max).
	CPUQuota float64 `json:"cpu_quota,omitempty"`
	// HostMemoryMiB caps the VMM process's host memory (memory.max). It
	// must leave room for the guest's memory and QEMU's own.
	HostMemoryMiB int `json:"host_memory_mib,omitempty"`
	// DiskMiB is the size of the guest's root filesystem as the guest can
	// fill it (at most the base image's size): beyond it writes fail with
	// ENOSPC in the guest.
	DiskMiB int `json:"disk_mib,omitempty"`
	// DiskBps caps disk bandwidth, reads and writes together, in bytes per
	// second (QEMU throttling).
	DiskBps int64 `json:"disk_bps,omitempty"`
	// NetBps caps network bandwidth in bytes per second, each direction on
	// its own (tc on the sandbox's tap; Cloud Hypervisor's rate limiter as
	// well on that backend).
	NetBps int64 `json:"net_bps,omitempty"`
	// MaxPids caps the processes that user commands may run at once.
	MaxPids int `json:"max_pids,omitempty"`
	// ExecTimeoutS is the default wall-clock timeout of each exec.
	ExecTimeoutS int `json:"exec_timeout_s,omitempty"`
	// IdleTimeoutS pauses the sandbox after that long without API calls,
	// running execs or guest CPU use.
	IdleTimeoutS int `json:"idle_timeout_s,omitempty"`
	// OnTimeout is what the end of timeout_s does: "delete" (default) or
	// "pause".
	OnTimeout string `json:"on_timeout,omitempty"`
}

// MinDiskBps is the lowest disk_bps, in bytes per second. Far below it
// QEMU's throttle lets one guest write through only after hours (at 1 B/s
// a 4 KiB block takes more than an hour), with every later I/O queued
// behind it: disk_bps 1 wedged the sandbox.
const MinDiskBps = 1 << 20

// On-timeout actions.
const (
	OnTimeoutDelete = "delete"
	OnTimeoutPause  = "pause"
)

// LimitOptions are hostd's defaults and maximums for Limits, and for the
// sizes in CreateOptions.
type LimitOptions struct {
	// Default fills the zero fields of a request's Limits.
	Default Limits `json:"default"`
	// Max bounds each field of a request (0 = unbounded; DiskMiB is always
	// bounded by the base image).
	Max Limits `json:"max"`
}

// limitStore persists limits (hostd/store implements it).
type limitStore interface {
	PutSandboxLimits(ctx context.Context, id string, limits any) error
	GetSandboxLimits(ctx context.Context, id string, v any) error
	DeleteSandboxLimits(ctx context.Context, id string) error
}

var _ limitStore = (*store.Store)(nil)

// Cgroups creates the VMM processes' cgroups (*cgroup.Manager implements it).
type Cgroups interface {
	Create(id string, l cgroup.Limits) (*cgroup.Group, error)
	Remove(id string) error
	List() ([]string, error)
}

var _ Cgroups = (*cgroup.Manager)(nil)

// Maximums bound what one API key may ask for. Zero fields leave hostd's
// global maximums in force; a key's maximum never raises them.
type Maximums struct {
	VCPUs     int    `json:"vcpus,omitempty"`
	MemoryMiB int    `json:"memory_mib,omitempty"`
	Limits    Limits `json:"limits"`
}

// limitPolicy resolves requested limits against hostd's defaults, its
// maximums and each API key's.
type limitPolicy struct {
	opts     LimitOptions
	keyMaxes map[string]Maximums
	baseMiB  int  // the base image's size, the most disk_mib can be
	cgroups  bool // cpu_quota and host_memory_mib can be enforced
	// store holds each sandbox's resolved limits.
	store limitStore
	log   *slog.Logger
}

// resolve fills l from the defaults and checks it against the global
// maximums.
func (p *limitPolicy) resolve(l Limits) (Limits, error) {
	return p.resolveMax(l, p.opts.Max, "", Limits{})
}

// keyMax is caller's maximums, and the words that name them in errors.
func (p *limitPolicy) keyMax(caller string) (Maximums, string, bool) {
	km, ok := p.keyMaxes[caller]
	if !ok || caller == "" {
		return Maximums{}, "", false
	}
	return km, fmt.Sprintf(" for API key %q", caller), true
}

// checkSizes checks vcpus and memory against caller's maximums.
func (p *limitPolicy) checkSizes(opts CreateOptions) error {
	km, who, ok := p.keyMax(opts.Caller)
	if !ok {
		return nil
	}
	if km.VCPUs > 0 && opts.VCPUs > km.VCPUs {
		return fmt.Errorf("%w: vcpus %d is over the maximum of %d%s", ErrInvalid, opts.VCPUs, km.VCPUs, who)
	}
	if km.MemoryMiB > 0 && opts.MemoryMiB > km.MemoryMiB {
		return fmt.Errorf("%w: memory_mib %d is over the maximum of %d%s", ErrInvalid, opts.MemoryMiB, km.MemoryMiB, who)
	}
	return nil
}

// resolveLimitsFor resolves l against the global maximums and caller's.
func (p *limitPolicy) resolveFor(l Limits, caller string) (Limits, error) {
	km, who, ok := p.keyMax(caller)
	if !ok {
		return p.resolve(l)
	}
	mx := p.opts.Max
	lower := func(g, k float64) float64 {
		if k > 0 && (g == 0 || k < g) {
			return k
		}
		return g
	}
	k := km.Limits
	mx.CPUQuota = lower(mx.CPUQuota, k.CPUQuota)
	mx.HostMemoryMiB = int(lower(float64(mx.HostMemoryMiB), float64(k.HostMemoryMiB)))
	mx.DiskMiB = int(lower(float64(mx.DiskMiB), float64(k.DiskMiB)))
	mx.DiskBps = int64(lower(float64(mx.DiskBps), float64(k.DiskBps)))
	mx.NetBps = int64(lower(float64(mx.NetBps), float64(k.NetBps)))
	mx.MaxPids = int(lower(float64(mx.MaxPids), float64(k.MaxPids)))
	mx.ExecTimeoutS = int(lower(float64(mx.ExecTimeoutS), float64(k.ExecTimeoutS)))
	mx.IdleTimeoutS = int(lower(float64(mx.IdleTimeoutS), float64(k.IdleTimeoutS)))
	return p.resolveMax(l, mx, who, k)
}

// resolveLimitsMax fills l from the defaults, caps what it leaves
// unlimited at capTo's maximums (an API key's), and checks it against mx;
// an error names the maximum exceeded (and whose it is, in who).
func (p *limitPolicy) resolveMax(l Limits, mx Limits, who string, capTo Limits) (Limits, error) {
	d := p.opts.Default
	fillZeros(&l, d)
	capUnlimited(&l, capTo, p.cgroups)
	if l.OnTimeout == "" {
		l.OnTimeout = d.OnTimeout
	}
	if l.OnTimeout == "" {
		l.OnTimeout = OnTimeoutDelete
	}
	if l.OnTimeout != OnTimeoutDelete && l.OnTimeout != OnTimeoutPause {
		return l, fmt.Errorf("%w: on_timeout must be delete or pause, got %q", ErrInvalid, l.OnTimeout)
	}
	if l.CPUQuota < 0 || l.HostMemoryMiB < 0 || l.DiskMiB < 0 || l.DiskBps < 0 || l.NetBps < 0 || l.MaxPids < 0 || l.ExecTimeoutS < 0 || l.IdleTimeoutS < 0 {
		return l, fmt.Errorf("%w: limits must not be negative", ErrInvalid)
	}
	checks := []struct {
		name     string
		got, max float64
	}{
		{"cpu_quota", l.CPUQuota, mx.CPUQuota},
		{"host_memory_mib", float64(l.HostMemoryMiB), float64(mx.HostMemoryMiB)},
		{"disk_mib", float64(l.DiskMiB), float64(mx.DiskMiB)},
		{"disk_bps", float64(l.DiskBps), float64(mx.DiskBps)},
		{"net_bps", float64(l.NetBps), float64(mx.NetBps)},
		{"max_pids", float64(l.MaxPids), float64(mx.MaxPids)},
		{"exec_timeout_s", float64(l.ExecTimeoutS), float64(mx.ExecTimeoutS)},
		{"idle_timeout_s", float64(l.IdleTimeoutS), float64(mx.IdleTimeoutS)},
	}
	if p.baseMiB > 0 && (mx.DiskMiB == 0 || mx.DiskMiB > p.baseMiB) {
		checks[2].max = float64(p.baseMiB)
	}
	for _, c := range checks {
		if c.max > 0 && c.got > c.max {
			return l, fmt.Errorf("%w: %s %s is over the maximum of %s%s", ErrInvalid, c.name, num(c.got), num(c.max), who)
		}
	}
	if !p.cgroups && (l.CPUQuota > 0 || l.HostMemoryMiB > 0) {
		return l, fmt.Errorf("%w: cpu_quota and host_memory_mib need cgroups, which this host does not offer", ErrInvalid)
	}
	if n := float64(runtime.NumCPU()); l.CPUQuota > n {
		return l, fmt.Errorf("%w: cpu_quota %s is over this host's %s CPUs", ErrInvalid, num(l.CPUQuota), num(n))
	}
	if l.CPUQuota > 0 && l.CPUQuota < 0.01 {
		return l, fmt.Errorf("%w: cpu_quota must be at least 0.01", ErrInvalid)
	}
	if l.MaxPids > 0 && l.MaxPids < 8 {
		return l, fmt.Errorf("%w: max_pids must be at least 8", ErrInvalid)
	}
	if l.NetBps > 0 && l.NetBps < netns.MinRate {
		return l, fmt.Errorf("%w: net_bps must be at least %d", ErrInvalid, netns.MinRate)
	}
	if l.DiskBps > 0 && l.DiskBps < MinDiskBps {
		return l, fmt.Errorf("%w: disk_bps must be at least %d (1 MiB/s)", ErrInvalid, MinDiskBps)
	}
	if l.ExecTimeoutS > MaxTimeoutS || l.IdleTimeoutS > MaxTimeoutS {
		return l, fmt.Errorf("%w: exec_timeout_s and idle_timeout_s must be at most %d", ErrInvalid, MaxTimeoutS)
	}
	return l, nil
}

// capUnlimited gives each limit that l leaves unlimited (0) the maximum
// of mx, where mx has one: an API key's maximum bounds "no limit" too, so
// that its request (or its fork of another's sandbox) gets no more than
// its maximum. The cgroup limits are capped only where cgroups enforce
// them.
func capUnlimited(l *Limits, mx Limits, cgroups bool) {
	if !cgroups {
		mx.CPUQuota, mx.HostMemoryMiB = 0, 0
	}
	fillZeros(l, mx)
}

// fillZeros gives each numeric limit that l leaves 0 the value of from.
func fillZeros(l *Limits, from Limits) {
	fillF(&l.CPUQuota, from.CPUQuota)
	fill(&l.HostMemoryMiB, from.HostMemoryMiB)
	fill(&l.DiskMiB, from.DiskMiB)
	fill64(&l.DiskBps, from.DiskBps)
	fill64(&l.NetBps, from.NetBps)
	fill(&l.MaxPids, from.MaxPids)
	fill(&l.ExecTimeoutS, from.ExecTimeoutS)
	fill(&l.IdleTimeoutS, from.IdleTimeoutS)
}

// num prints a limit in plain decimal (bytes per second are large, and %v
// would print them as 1.6777216e+07).
func num(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func fill(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

func fill64(v *int64, d int64) {
	if *v == 0 {
		*v = d
	}
}

func fillF(v *float64, d float64) {
	if *v == 0 {
		*v = d
	}
}

// checkHostMemory refuses a host memory cap that cannot hold the guest.
func checkHostMemory(l Limits, memoryMiB int) error {
	if l.HostMemoryMiB > 0 && l.HostMemoryMiB < memoryMiB+64 {
		return fmt.Errorf("%w: host_memory_mib %d must be at least memory_mib + 64 (%d)", ErrInvalid, l.HostMemoryMiB, memoryMiB+64)
	}
	return nil
}

// of loads a sandbox's limits; a sandbox without a row (a warm pool
// entry) gets the defaults.
func (p *limitPolicy) of(ctx context.Context, id string) Limits {
	var l Limits
	err := p.store.GetSandboxLimits(ctx, id, &l)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			p.log.Error("load limits", "sandbox_id", id, "err", err)
		}
		l, _ = p.resolve(Limits{})
	}
	return l
}

// defaultLimits reports whether l is what an empty request resolves to.
func (p *limitPolicy) isDefault(l Limits) bool {
	d, _ := p.resolve(Limits{})
	return l == d
}

// diskUsed is the host disk space that sandbox dir's overlays take.
func diskUsed(dir string) int64 {
	ms, _ := filepath.Glob(filepath.Join(dir, "disk-*.qcow2"))
	var n int64
	for _, p := range ms {
		if fi, err := os.Stat(p); err == nil {
			n += allocated(fi)
		}
	}
	return n
}
