package agent

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// unixSignalName returns the SIGxxx name of s.
func unixSignalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}
