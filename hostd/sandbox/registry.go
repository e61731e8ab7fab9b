package sandbox

import (
	"sync"
	"time"
)

// entry is hostd's one in-memory record of a sandbox, from its create (or
// its recovery at start) to its delete. It outlives the sandbox's VMs: a
// pause ends the box, a resume makes a new one.
type entry struct {
	id string
	// resume serializes resumes of this sandbox: a second caller finds it
	// running.
	resume sync.Mutex
	// meter is its usage across its VMs; ttl its timeout; rec the flight
	// recorder's state of its execs and guest events. Each has its own lock.
	meter meter
	ttl   ttl
	rec   execLog

	mu sync.Mutex // guards the fields below
	// box is the running VM; nil while paused or not yet running.
	box *runningVM
	// net is what boot gives the VM for its network.
	net netAttachment
	// kills are the exec timeouts' timers by exec id; dueKills the execs
	// whose timeout passed while the sandbox was paused, killed when it runs
	// again.
	kills    map[string]*time.Timer
	dueKills []string
	// earlierExecs is set for a sandbox found paused at start: its first
	// resume takes over the execs an earlier hostd started (readoptExecs).
	earlierExecs bool
}

// live returns e's running box, or nil.
func (e *entry) live() *runningVM {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.box
}

// registry holds the entries by sandbox id.
type registry struct {
	mu sync.Mutex
	m  map[string]*entry
}

// get returns id's entry, making it if needed.
func (r *registry) get(id string) *entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*entry{}
	}
	e := r.m[id]
	if e == nil {
		e = &entry{id: id}
		e.rec.init()
		r.m[id] = e
	}
	return e
}

// find returns id's entry, or nil.
func (r *registry) find(id string) *entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

// live returns id's running box, or nil.
func (r *registry) live(id string) *runningVM {
	if e := r.find(id); e != nil {
		return e.live()
	}
	return nil
}

// remove drops id's entry and stops its timer.
func (r *registry) remove(id string) {
	r.mu.Lock()
	e := r.m[id]
	delete(r.m, id)
	r.mu.Unlock()
	if e != nil {
		e.stopTimers()
	}
}

// stopTimers stops e's TTL and exec timeout timers.
func (e *entry) stopTimers() {
	e.ttl.disarm()
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, t := range e.kills {
		t.Stop()
		delete(e.kills, id)
	}
}

// disarmKill stops the timeout timer of exec execID, if one runs: the exec
// has exited (with the flight recorder off, nothing watches for the exit,
// and the timer's kill of an exited session does nothing).
func (e *entry) disarmKill(execID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.kills[execID]; t != nil {
		t.Stop()
		delete(e.kills, execID)
	}
}

// forget takes b out of the live set; it reports whether b was there.
func (r *registry) forget(b *runningVM) bool {
	e := r.find(b.id)
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.box != b {
		return false
	}
	e.box = nil
	return true
}

// entries returns every entry.
func (r *registry) entries() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*entry, 0, len(r.m))
	for _, e := range r.m {
		out = append(out, e)
	}
	return out
}

// boxes returns every running box.
func (r *registry) boxes() []*runningVM {
	var out []*runningVM
	for _, e := range r.entries() {
		if b := e.live(); b != nil {
			out = append(out, b)
		}
	}
	return out
}

// ttl is a sandbox's timeout timer.
type ttl struct {
	mu    sync.Mutex
	end   time.Time
	timer *time.Timer
}

// arm starts the timer to call fire after d, unless one runs or d <= 0.
func (t *ttl) arm(d time.Duration, fire func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil || d <= 0 {
		return
	}
	t.end = time.Now().Add(d)
	t.timer = time.AfterFunc(d, func() {
		t.mu.Lock()
		t.timer, t.end = nil, time.Time{}
		t.mu.Unlock()
		fire()
	})
}

// disarm stops the timer.
func (t *ttl) disarm() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
		t.timer, t.end = nil, time.Time{}
	}
}

// deadline is when the timer fires (zero when it does not run).
func (t *ttl) deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.end
}
