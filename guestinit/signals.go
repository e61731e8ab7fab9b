package guestinit

import (
	"os"
	"os/signal"
	"syscall"
)

// ignoreSignals makes PID 1 deaf to every signal a guest process can send
// it. The kernel delivers a signal from a process of the guest to init only
// if init has a handler for it, and Go's runtime installs one for nearly
// every signal, whose default is to end the program (TERM, INT, HUP, QUIT,
// USR1, USR2, ABRT, ...). signal.Notify takes each of them over and the
// returned drain drops them; SIGSEGV, SIGBUS and SIGFPE sent with kill(2)
// are asynchronous (si_code SI_USER) and take the same path, while a real
// fault in guestinit still panics. Notify rather than signal.Ignore: an
// ignored disposition is inherited over exec, and every command the agent
// starts would then ignore SIGTERM and SIGINT too. SIGCHLD stays with the
// reaper (Notify does not take it from other channels).
func ignoreSignals() (stop func()) {
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, catchable()...)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sigs:
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// catchable lists signals 1..64 but SIGKILL and SIGSTOP (which cannot be
// caught, and which the kernel never delivers to init from inside its
// namespace), SIGCHLD (the reaper's), and SIGPROF and SIGURG (the runtime's
// own, harmless when sent: it drops them).
func catchable() []os.Signal {
	var out []os.Signal
	for n := 1; n <= 64; n++ {
		switch s := syscall.Signal(n); s {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGPROF, syscall.SIGURG:
		default:
			out = append(out, s)
		}
	}
	return out
}
