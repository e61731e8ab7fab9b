package guestinit

import (
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/guestinit/agent"
)

// Reaper is PID 1's only waiter: it reaps every child, orphans included, and
// hands the exit status of the processes it started to whoever asked. Nothing
// else in guestinit may wait for a child (cmd.Wait would race with it).
type Reaper struct {
	mu      sync.Mutex
	waiting map[int]chan agent.ExitStatus
}

var _ agent.Spawner = (*Reaper)(nil)

// NewReaper returns a Reaper; call Run to start reaping.
func NewReaper() *Reaper {
	return &Reaper{waiting: map[int]chan agent.ExitStatus{}}
}

// Spawn starts cmd and returns a channel that gets its exit status. The lock
// is held across Start so a child that exits at once is still found.
func (r *Reaper) Spawn(cmd *exec.Cmd) (<-chan agent.ExitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan agent.ExitStatus, 1)
	r.waiting[cmd.Process.Pid] = ch
	return ch, nil
}

// Run reaps children forever.
func (r *Reaper) Run(log *slog.Logger) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-sigs:
		case <-tick.C:
		}
		r.reap(log)
	}
}

func (r *Reaper) reap(log *slog.Logger) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		r.mu.Lock()
		ch, ok := r.waiting[pid]
		delete(r.waiting, pid)
		r.mu.Unlock()
		if ok {
			ch <- agent.StatusOf(syscall.WaitStatus(ws))
		} else {
			log.Debug("reaped orphan", "pid", pid)
		}
	}
}
