package waitfor

import (
	"sync/atomic"
	"testing"
)

//go:noinline
func parkHere(release <-chan struct{}) { <-release }

//go:noinline
func spinHere(stop *atomic.Bool) {
	for !stop.Load() {
	}
}

// TestBlockedAndGone: Blocked returns once a goroutine waits in the
// function named, not while one only runs in it; Gone once it returned.
func TestBlockedAndGone(t *testing.T) {
	var stop atomic.Bool
	spun := make(chan struct{})
	go func() { defer close(spun); spinHere(&stop) }()
	release := make(chan struct{})
	parked := make(chan struct{})
	go func() { defer close(parked); parkHere(release) }()
	Blocked(t, "waitfor.parkHere")
	for _, g := range goroutines() {
		if g.in("waitfor.spinHere") && g.blocked() {
			t.Errorf("a goroutine spinning is %q, reported blocked", g.state)
		}
	}
	close(release)
	<-parked
	Gone(t, "waitfor.parkHere")
	stop.Store(true)
	<-spun
}

func TestCond(t *testing.T) {
	n := 0
	Cond(t, "the third ask", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("asked %d times, want 3", n)
	}
}
