// Package fault is a test hook for crash consistency: a hostd started with
// AGENTBOX_FAULT=<step> kills itself (SIGKILL, as kill -9 would: no
// deferred cleanup, no flush) when it reaches the named step of an
// operation. The steps are named where Point is called (hostd/sandbox);
// without the variable, Point does nothing.
package fault

import (
	"os"
	"sync"
	"syscall"
)

// Env is the environment variable naming the step to die at.
const Env = "AGENTBOX_FAULT"

var step = sync.OnceValue(func() string { return os.Getenv(Env) })

// Point kills this process at once if Env names name.
func Point(name string) {
	if s := step(); s != "" && s == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
