package mounts

import (
	"sync"
	"sync/atomic"
)

// Stats counts the mount calls this process served, over every sandbox:
// what `go run ./ci/bench -mounts-only` prints beside its figures (request
// sizes, round trips per MiB, calls in flight at once).
type Stats struct {
	// Calls is the number of calls of each method ("Read", "Lstat"...).
	Calls map[string]uint64
	// ReadBytes and WriteBytes are the bytes the Read and Write calls
	// moved.
	ReadBytes, WriteBytes uint64
	// DirEntries is the number of entries the ReadDir calls returned.
	DirEntries uint64
	// MaxInFlight is the most calls that ran at once in one connection.
	MaxInFlight int64
}

// stats is the process's counters (ReadStats).
var stats struct {
	mu                    sync.Mutex
	calls                 map[string]uint64
	readBytes, writeBytes atomic.Uint64
	dirEntries            atomic.Uint64
	maxInFlight           atomic.Int64
}

// ReadStats returns the counters since the process started.
func ReadStats() Stats {
	stats.mu.Lock()
	calls := make(map[string]uint64, len(stats.calls))
	for k, v := range stats.calls {
		calls[k] = v
	}
	stats.mu.Unlock()
	return Stats{Calls: calls, ReadBytes: stats.readBytes.Load(), WriteBytes: stats.writeBytes.Load(),
		DirEntries: stats.dirEntries.Load(), MaxInFlight: stats.maxInFlight.Load()}
}

// Sub returns the counts of s since the earlier snapshot old (MaxInFlight
// is s's).
func (s Stats) Sub(old Stats) Stats {
	out := Stats{Calls: map[string]uint64{}, ReadBytes: s.ReadBytes - old.ReadBytes, WriteBytes: s.WriteBytes - old.WriteBytes,
		DirEntries: s.DirEntries - old.DirEntries, MaxInFlight: s.MaxInFlight}
	for k, v := range s.Calls {
		if d := v - old.Calls[k]; d > 0 {
			out.Calls[k] = d
		}
	}
	return out
}

// ResetMaxInFlight starts MaxInFlight afresh (the bench, between steps).
func ResetMaxInFlight() { stats.maxInFlight.Store(0) }

// countCall counts one call of method.
func countCall(method string) {
	stats.mu.Lock()
	if stats.calls == nil {
		stats.calls = map[string]uint64{}
	}
	stats.calls[method]++
	stats.mu.Unlock()
}

// noteInFlight records that n calls of one connection run at once.
func noteInFlight(n int64) {
	for {
		cur := stats.maxInFlight.Load()
		if n <= cur || stats.maxInFlight.CompareAndSwap(cur, n) {
			return
		}
	}
}
