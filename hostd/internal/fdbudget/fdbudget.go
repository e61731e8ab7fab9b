// Package fdbudget keeps room in hostd's file descriptors for its API. The
// proxies that serve guests (egress, service URLs) take each connection's
// descriptors from a Budget, which refuses once the process's open
// descriptors reach the RLIMIT_NOFILE soft limit less a reserve: a guest
// that floods them meets a refusal, and /healthz and every other sandbox's
// API calls keep their descriptors.
package fdbudget

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultReserve is the reserve of a limit: a tenth of it, at least 1024,
// at most half of it.
func DefaultReserve(limit int) int {
	return min(max(1024, limit/10), limit/2)
}

// recount is how often Acquire counts the process's open descriptors; in
// between it adds what the proxies took since to the last count.
const recount = 250 * time.Millisecond

// Budget is the descriptors the proxies may still open. The zero Budget
// and a nil one refuse nothing.
type Budget struct {
	max   int64               // limit − reserve; 0: no budget
	count func() (int, error) // the process's open descriptors

	held    atomic.Int64 // taken by the proxies and not yet released
	others  atomic.Int64 // open descriptors not held, at the last count
	counted atomic.Int64 // when, in Unix nanoseconds
	mu      sync.Mutex   // one count at a time
}

// New returns a Budget of limit descriptors, of which reserve are kept for
// the rest of the process.
func New(limit, reserve int) *Budget {
	return &Budget{max: int64(limit - reserve), count: countOpen}
}

// FromRlimit raises the RLIMIT_NOFILE soft limit to the hard one (Go's
// runtime does so too at start; an embedder's may not have) and returns a
// Budget of it with DefaultReserve.
func FromRlimit() (*Budget, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return nil, fmt.Errorf("fdbudget: getrlimit: %w", err)
	}
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			rl = raised
		}
	}
	limit := int(min(rl.Cur, 1<<30))
	return New(limit, DefaultReserve(limit)), nil
}

// Max is how many descriptors the process may have open before Acquire
// refuses (0: no budget).
func (b *Budget) Max() int {
	if b == nil {
		return 0
	}
	return int(b.max)
}

// Acquire takes n descriptors for a connection about to be served, or
// reports false (taking none) if the process would then hold more than
// Max. Release gives them back.
func (b *Budget) Acquire(n int) bool {
	if b == nil || b.max <= 0 {
		return true
	}
	b.refresh()
	held := b.held.Add(int64(n))
	if held+b.others.Load() > b.max {
		b.held.Add(-int64(n))
		return false
	}
	return true
}

// Release gives back n descriptors taken by Acquire.
func (b *Budget) Release(n int) {
	if b == nil || b.max <= 0 {
		return
	}
	b.held.Add(-int64(n))
}

// refresh counts the open descriptors if the last count is older than
// recount and no other caller is counting.
func (b *Budget) refresh() {
	now := time.Now().UnixNano()
	if now-b.counted.Load() < int64(recount) || !b.mu.TryLock() {
		return
	}
	defer b.mu.Unlock()
	open, err := b.count()
	if err != nil {
		return // keep the last count
	}
	b.others.Store(max(int64(open)-b.held.Load(), 0))
	b.counted.Store(now)
}

// countOpen counts /proc/self/fd's entries (less the one that reads it).
func countOpen() (int, error) {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(4096)
		n += len(names)
		if err != nil || len(names) == 0 {
			break
		}
	}
	return n - 1, nil
}
