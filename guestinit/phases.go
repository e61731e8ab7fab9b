package guestinit

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// phases times guestinit's boot for the READY line, which hostd reads from
// the console log for its per-phase breakdown of a create:
//
//	AGENTBOX-READY in 812ms kernel=401ms modules=75ms root=30ms net=20ms agent=5ms
//
// kernel is the time from the kernel's start to PID 1 (CLOCK_BOOTTIME).
type phases struct {
	last time.Time
	b    strings.Builder
}

func newPhases(booted time.Time) *phases {
	p := &phases{last: booted}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err == nil {
		up := time.Duration(ts.Nano()) - time.Since(booted)
		fmt.Fprintf(&p.b, " kernel=%v", up.Round(time.Millisecond))
	}
	return p
}

// done ends the phase called name.
func (p *phases) done(name string) {
	now := time.Now()
	fmt.Fprintf(&p.b, " %s=%v", name, now.Sub(p.last).Round(time.Millisecond))
	p.last = now
}

func (p *phases) String() string { return p.b.String() }
