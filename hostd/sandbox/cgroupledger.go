package sandbox

import (
	"sync"

	"github.com/agentbox/agentbox/hostd/cgroup"
)

// cgroupLedger is the ledger of the cgroups this hostd holds: each one
// made for a VMM it starts (vmmPlacer.place) or opened for one it adopts
// (readopt), from then until its runningVM removes it. The reaper takes
// only a group that nobody holds, and keeps the ledger locked while it
// does, so a create, resume or fork of the same id cannot make the group
// again between the reaper's check and its kill. The ledger, not the live
// set or the record's state, is what the reaper asks: those two are read
// at different moments, and a VM registered between them would look like
// an orphan. One lock serves all ids: orphans are rare and a placement is
// a few cgroup writes.
type cgroupLedger struct {
	mu   sync.Mutex
	held map[string]int
}

// hold runs open, which makes or opens id's cgroup, and holds id until the
// returned release is called (once; later calls do nothing). On error
// nothing is held.
func (g *cgroupLedger) hold(id string, open func() (*cgroup.Group, error)) (*cgroup.Group, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	grp, err := open()
	if err != nil {
		return nil, func() {}, err
	}
	if g.held == nil {
		g.held = map[string]int{}
	}
	g.held[id]++
	var once sync.Once
	return grp, func() { once.Do(func() { g.release(id) }) }, nil
}

// release drops one hold of id.
func (g *cgroupLedger) release(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[id]--; g.held[id] <= 0 {
		delete(g.held, id)
	}
}

// holds reports whether id is held.
func (g *cgroupLedger) holds(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[id] > 0
}

// unheld runs reap, with the ledger locked, if nobody holds id, and
// reports whether it ran.
func (g *cgroupLedger) unheld(id string, reap func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[id] > 0 {
		return false
	}
	reap()
	return true
}
