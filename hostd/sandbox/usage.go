package sandbox

import (
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Usage is what a sandbox has consumed since it was created (by this
// hostd: counters of VMs that ran before a hostd restart are lost).
type Usage struct {
	// CPUSeconds is the host CPU time of its VMM processes.
	CPUSeconds float64
	// MemoryPeakBytes is the most host memory one of its VMM processes had
	// charged at once; MemoryBytes what the running one has now.
	MemoryPeakBytes, MemoryBytes uint64
	// DiskUsedBytes is the host disk space its overlays take.
	DiskUsedBytes int64
	// BytesIn and BytesOut count what passed through the agent channel
	// into and out of the guest (commands, stdin, files; output, reads).
	// Guest network traffic is not counted here.
	BytesIn, BytesOut int64
}

// meter accumulates a sandbox's usage across its VMs (pause/resume starts a
// new VMM process and cgroup).
type meter struct {
	in, out atomic.Int64

	mu   sync.Mutex
	cpu  float64 // CPU seconds of ended VMs
	peak uint64
}

// allocated is the disk space a file takes (holes are free).
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// Usage reports what sandbox id has consumed.
func (m *Manager) Usage(ctx context.Context, id string) (Usage, error) {
	rec, err := m.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return Usage{}, notFound(err, id)
	}
	e := m.reg.get(id)
	mt := &e.meter
	mt.mu.Lock()
	u := Usage{CPUSeconds: mt.cpu, MemoryPeakBytes: mt.peak, BytesIn: mt.in.Load(), BytesOut: mt.out.Load()}
	mt.mu.Unlock()
	if b := e.live(); b != nil && b.cgroup != nil {
		if st, err := b.cgroup.Stats(); err == nil {
			u.CPUSeconds += st.CPUSeconds
			u.MemoryBytes = st.MemoryBytes
			u.MemoryPeakBytes = max(u.MemoryPeakBytes, st.MemoryPeakBytes)
		}
	}
	u.DiskUsedBytes = diskUsed(rec.Dir)
	return u, nil
}

// countingConn counts the bytes of an agent connection into a meter.
type countingConn struct {
	net.Conn
	mt *meter
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mt.out.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mt.in.Add(int64(n))
	return n, err
}
