// Package waitfor lets a test wait for an event that gives it no channel
// to wait on: a condition that comes to hold, a goroutine that blocks in a
// given function, goroutines that end. Each wait is bounded by a generous
// hang guard (Timeout), after which it fails the test saying what it
// waited for; nothing here measures how long anything takes.
package waitfor

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Timeout bounds every wait: a hang guard, far above what any wait takes
// on a loaded machine, not a timing.
const Timeout = time.Minute

// poll is how often a condition is asked again.
const poll = 2 * time.Millisecond

// Cond waits until cond holds; it fails t with what after Timeout.
func Cond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", Timeout, what)
		}
		time.Sleep(poll)
	}
}

// Blocked waits until a goroutine is blocked (in a channel operation, a
// select, a lock, a sleep or the runtime's poller) in fn: fn is the first
// function outside package runtime on its stack. fn is a function's name
// as a stack trace shows it, with as much of its package path as makes it
// unambiguous, e.g. "watch.(*Ring).Next".
func Blocked(t testing.TB, fn string) {
	t.Helper()
	Cond(t, "a goroutine blocked in "+fn, func() bool {
		for _, g := range goroutines() {
			if g.blocked() && g.in(fn) {
				return true
			}
		}
		return false
	})
}

// Gone waits until no goroutine has any of fns anywhere on its stack.
func Gone(t testing.TB, fns ...string) {
	t.Helper()
	Cond(t, "no goroutine in "+strings.Join(fns, ", "), func() bool {
		for _, g := range goroutines() {
			for _, fn := range fns {
				if g.calls(fn) {
					return false
				}
			}
		}
		return true
	})
}

// goroutine is one goroutine of a stack dump.
type goroutine struct {
	state  string   // "running", "select", "chan receive", ...
	frames []string // function names, innermost first
}

// goroutines dumps every goroutine's stack.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for _, block := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(block, "\n")
		_, state, ok := strings.Cut(lines[0], " [")
		if !ok {
			continue
		}
		state, _, _ = strings.Cut(strings.TrimSuffix(state, "]:"), ",")
		g := goroutine{state: state}
		for _, l := range lines[1:] {
			if l == "" || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by ") {
				continue
			}
			if i := strings.LastIndexByte(l, '('); i > 0 && strings.HasSuffix(l, ")") {
				l = l[:i]
			}
			g.frames = append(g.frames, l)
		}
		gs = append(gs, g)
	}
	return gs
}

// blocked reports whether g waits for something (it is not running, about
// to run, or in a system call).
func (g goroutine) blocked() bool {
	switch g.state {
	case "running", "runnable", "syscall", "idle":
		return false
	}
	return true
}

// in reports whether fn is g's first frame outside package runtime.
func (g goroutine) in(fn string) bool {
	for _, f := range g.frames {
		if !strings.HasPrefix(f, "runtime.") {
			return names(f, fn)
		}
	}
	return false
}

// calls reports whether fn is on g's stack.
func (g goroutine) calls(fn string) bool {
	for _, f := range g.frames {
		if names(f, fn) {
			return true
		}
	}
	return false
}

// names reports whether frame f, a full function name, is fn or ends in
// "/"+fn.
func names(f, fn string) bool { return f == fn || strings.HasSuffix(f, "/"+fn) }
