package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
)

// ErrCapacity refuses a sandbox that this host cannot hold: larger than
// the host, over its committed memory or vCPUs (capacity times the
// overcommit ratio), or one that would take the host's available memory
// under the reserve. The API answers 503 with the limit named.
var ErrCapacity = errors.New("sandbox: over this host's capacity")

// Admission defaults (Options.MemoryOvercommit, VCPUOvercommit,
// MemoryReserveMiB). An idle guest here holds ~45 MiB of host memory of
// the 512 MiB it is promised (make bench: PSS per fork), so promising 2x
// the host's memory leaves room for every guest to touch a third of its
// memory at once; a denser host (the density bench's 200 idle sandboxes)
// raises the ratio. vCPUs are time-shared, and an idle one costs little:
// 32 per CPU.
const (
	DefaultMemoryOvercommit = 2.0
	DefaultVCPUOvercommit   = 32.0
	DefaultMemoryReserveMiB = 1024
)

// capacity admits new sandboxes by what the host can hold. The committed
// memory and vCPUs are those of the sandboxes whose VMs run or are being
// made (the store's records), and of the admissions not yet recorded.
type capacity struct {
	memoryRatio, vcpuRatio float64
	reserveMiB             int
	// list sums the committed vCPUs and memory (Manager.committed).
	list func(ctx context.Context) (vcpus, memMiB int, err error)
	// hostMem is the host's memory and available memory in MiB, and cpus
	// its CPUs (read from /proc/meminfo and the runtime; tests set them).
	hostMem func() (totalMiB, availMiB int, err error)
	cpus    int

	// maxSandboxes caps the sandboxes the host holds at once (0: none);
	// count counts those it holds (Manager.committedCount).
	maxSandboxes int
	count        func(ctx context.Context) (int, error)

	mu                                 sync.Mutex
	pendingVCPUs, pendingMiB, pendingN int
}

func newCapacity(o Options, list func(ctx context.Context) (int, int, error)) *capacity {
	c := &capacity{memoryRatio: o.MemoryOvercommit, vcpuRatio: o.VCPUOvercommit, reserveMiB: o.MemoryReserveMiB,
		list: list, hostMem: meminfo, cpus: runtime.NumCPU(), maxSandboxes: o.MaxSandboxes}
	if c.memoryRatio == 0 {
		c.memoryRatio = DefaultMemoryOvercommit
	}
	if c.vcpuRatio == 0 {
		c.vcpuRatio = DefaultVCPUOvercommit
	}
	if c.reserveMiB == 0 {
		c.reserveMiB = DefaultMemoryReserveMiB
	}
	return c
}

// admit reserves vcpus and memMiB for a new sandbox, or refuses it with
// ErrCapacity naming the limit; the caller calls release once the
// sandbox is recorded (or failed).
func (c *capacity) admit(ctx context.Context, vcpus, memMiB int) (release func(), err error) {
	total, avail, err := c.hostMem()
	if err != nil {
		return nil, fmt.Errorf("sandbox: host memory: %w", err)
	}
	switch {
	case memMiB > total:
		return nil, fmt.Errorf("%w: memory_mib %d is more than the host's %d MiB", ErrCapacity, memMiB, total)
	case vcpus > c.cpus:
		return nil, fmt.Errorf("%w: vcpus %d is more than the host's %d CPUs", ErrCapacity, vcpus, c.cpus)
	case avail-memMiB < c.reserveMiB:
		return nil, fmt.Errorf("%w: the host has %d MiB available, and a %d MiB sandbox would leave less than its reserve of %d MiB",
			ErrCapacity, avail, memMiB, c.reserveMiB)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	usedV, usedM, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	usedV += c.pendingVCPUs
	usedM += c.pendingMiB
	if maxM := int(float64(total) * c.memoryRatio); usedM+memMiB > maxM {
		return nil, fmt.Errorf("%w: %d MiB of memory committed, and %d more would pass the host's %d MiB (%d MiB x memory overcommit %s)",
			ErrCapacity, usedM, memMiB, maxM, total, num(c.memoryRatio))
	}
	if maxV := int(float64(c.cpus) * c.vcpuRatio); usedV+vcpus > maxV {
		return nil, fmt.Errorf("%w: %d vCPUs committed, and %d more would pass the host's %d (%d CPUs x vCPU overcommit %s)",
			ErrCapacity, usedV, vcpus, maxV, c.cpus, num(c.vcpuRatio))
	}
	if c.maxSandboxes > 0 && c.count != nil {
		n, err := c.count(ctx)
		if err != nil {
			return nil, err
		}
		if n+c.pendingN >= c.maxSandboxes {
			return nil, fmt.Errorf("%w: the host holds %d sandboxes, its most (max sandboxes %d)", ErrCapacity, n+c.pendingN, c.maxSandboxes)
		}
	}
	c.pendingVCPUs += vcpus
	c.pendingMiB += memMiB
	c.pendingN++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.pendingVCPUs -= vcpus
			c.pendingMiB -= memMiB
			c.pendingN--
			c.mu.Unlock()
		})
	}, nil
}

// Admissible is what the host admits in all, the bounds that admission
// checks: its memory times the memory overcommit less the reserve, and its
// CPUs times the vCPU overcommit (a fleet host reports them).
func (m *Manager) Admissible() (memMiB, vcpus int64, err error) {
	c := m.capacity
	total, _, err := c.hostMem()
	if err != nil {
		return 0, 0, fmt.Errorf("sandbox: host memory: %w", err)
	}
	return max(int64(float64(total)*c.memoryRatio)-int64(c.reserveMiB), 0), int64(float64(c.cpus) * c.vcpuRatio), nil
}

// meminfo reads the host's total and available memory in MiB.
func meminfo() (totalMiB, availMiB int, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.Atoi(string(f[1]))
		if err != nil {
			continue
		}
		switch string(f[0]) {
		case "MemTotal:":
			totalMiB = kb >> 10
		case "MemAvailable:":
			availMiB = kb >> 10
		}
	}
	if totalMiB == 0 {
		return 0, 0, errors.New("no MemTotal in /proc/meminfo")
	}
	return totalMiB, availMiB, nil
}

// committed sums the vCPUs and memory of the sandboxes whose VMs run or
// are being made.
func (m *Manager) committed(ctx context.Context) (vcpus, memMiB int, err error) {
	recs, err := m.opts.Store.ListSandboxes(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range recs {
		switch State(r.State) {
		case StateCreating, StateRunning, StateResuming, StatePausing, StateStopping:
			vcpus += r.VCPUs
			memMiB += r.MemoryMiB
		}
	}
	return vcpus, memMiB, nil
}

// committedCount counts the sandboxes whose VMs run or are being made.
func (m *Manager) committedCount(ctx context.Context) (int, error) {
	recs, err := m.opts.Store.ListSandboxes(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		switch State(r.State) {
		case StateCreating, StateRunning, StateResuming, StatePausing, StateStopping, StatePaused:
			n++
		}
	}
	return n, nil
}
