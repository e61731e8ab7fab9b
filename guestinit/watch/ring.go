package watch

import (
	"context"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Limits of the ring and of one Next.
const (
	RingSize       = 8192 // events kept
	defaultNextMax = 1024 // events one Next returns when max is 0
	maxNextMax     = RingSize
	maxNextWait    = 30 * time.Second
)

// Ring keeps the newest events, numbered from 1 in the order they were
// added. It is safe for concurrent use.
type Ring struct {
	mu   sync.Mutex
	buf  []*agentv1.GuestEvent
	head uint64        // seq of the newest event, 0 before the first
	more chan struct{} // closed and replaced on every Add
	// overflows counts the kernel queue overflows seen (events lost
	// before they reached the ring).
	overflows uint64
}

// Overflowed notes that the kernel dropped events before the ring saw them.
func (r *Ring) Overflowed() {
	r.mu.Lock()
	r.overflows++
	r.mu.Unlock()
}

// Overflows is how many times the kernel dropped events.
func (r *Ring) Overflows() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overflows
}

// NewRing returns a ring of n events (RingSize when n <= 0).
func NewRing(n int) *Ring {
	if n <= 0 {
		n = RingSize
	}
	return &Ring{buf: make([]*agentv1.GuestEvent, n), more: make(chan struct{})}
}

// Add numbers ev (setting its Seq) and stores it, dropping the oldest event
// when the ring is full.
func (r *Ring) Add(ev *agentv1.GuestEvent) {
	validUTF8(ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.head++
	ev.Seq = r.head
	r.buf[(r.head-1)%uint64(len(r.buf))] = ev
	close(r.more)
	r.more = make(chan struct{})
}

// Head is the seq of the newest event (0: none yet).
func (r *Ring) Head() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.head
}

// Batch is what Next returns.
type Batch struct {
	Events []*agentv1.GuestEvent
	Head   uint64 // seq of the newest event
	Lost   uint64 // events above after that the ring no longer holds
}

// Next returns up to max events with a seq above after, oldest first. When
// after is the newest seq it waits up to wait (at most 30s) for one, or until
// ctx ends. An after above the newest returns at once with no events and
// the head, where a new reader starts.
func (r *Ring) Next(ctx context.Context, after uint64, wait time.Duration, max int) Batch {
	if max <= 0 {
		max = defaultNextMax
	}
	max = min(max, maxNextMax)
	wait = min(wait, maxNextWait)
	var timer <-chan time.Time
	for {
		r.mu.Lock()
		b, more := r.collect(after, max), r.more
		r.mu.Unlock()
		if len(b.Events) > 0 || after > b.Head || wait <= 0 {
			return b
		}
		if timer == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-more:
		case <-timer:
			return b
		case <-ctx.Done():
			return b
		}
	}
}

// collect reads the events above after; r.mu is held.
func (r *Ring) collect(after uint64, max int) Batch {
	b := Batch{Head: r.head}
	if after >= r.head {
		return b
	}
	oldest := uint64(1)
	if n := uint64(len(r.buf)); r.head > n {
		oldest = r.head - n + 1
	}
	first := after + 1
	if first < oldest {
		b.Lost = oldest - first
		first = oldest
	}
	for s := first; s <= r.head && len(b.Events) < max; s++ {
		b.Events = append(b.Events, r.buf[(s-1)%uint64(len(r.buf))])
	}
	return b
}

// validUTF8 makes ev's strings valid UTF-8, each stray byte U+FFFD: a file
// or package name need not be UTF-8, and one that is not would make every
// reply holding the event unencodable (proto strings), stalling the host's
// reader at it for good. The flight recorder shows such names, it does not
// address files by them.
func validUTF8(ev *agentv1.GuestEvent) {
	fix := func(s *string) {
		if !utf8.ValidString(*s) {
			*s = strings.ToValidUTF8(*s, "\uFFFD")
		}
	}
	fix(&ev.ExecId)
	if f := ev.GetFile(); f != nil {
		fix(&f.Op)
		fix(&f.Path)
		fix(&f.OldPath)
		fix(&f.Sha256)
	}
	if p := ev.GetPackage(); p != nil {
		for _, s := range []*string{&p.Manager, &p.Action, &p.Name, &p.Version, &p.OldVersion, &p.Path} {
			fix(s)
		}
	}
}
