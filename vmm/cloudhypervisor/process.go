package cloudhypervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

// process is one cloud-hypervisor process: a child that this hostd started
// (startProcess), or one that an earlier hostd started, held by its pidfd
// (adoptProcess). done is closed once it has exited; err is the exit error,
// which only the parent sees (nil for an adopted process).
type process struct {
	id      vmm.Process
	done    chan struct{}
	err     error                      // written before done is closed
	sig     func(syscall.Signal) error // an exited process is not an error
	release func()                     // lets go of the process, which runs on
}

// startProcess runs bin with args, its stdout and stderr going to logPath.
// The process is not tied to any context or to hostd: it lives until stop
// (vmm.StartProcess), or past hostd once the VM is released for a later
// Adopt.
func startProcess(bin string, args, env []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cloudhypervisor: open log: %w", err)
	}
	defer logf.Close() // the child keeps its own copy

	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	if err := vmm.StartProcess(cmd); err != nil {
		return nil, fmt.Errorf("cloudhypervisor: start %s: %w", bin, err)
	}
	id, _ := vmm.Identify(cmd.Process.Pid) // the child is not reaped yet
	id.PID = cmd.Process.Pid
	p := &process{id: id, done: make(chan struct{}), release: func() {}}
	p.sig = func(sig syscall.Signal) error {
		if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("cloudhypervisor: signal %v: %w", sig, err)
		}
		return nil
	}
	// A released child is still reaped here: nobody else can.
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// reapWait bounds how long an adopted process's end waits for its parent
// to reap it.
const reapWait = 5 * time.Second

// adoptProcess wraps h, a cloud-hypervisor of an earlier hostd. It is not
// this process's child: done is closed once it has exited and its parent
// (init, or a subreaper) has reaped it, or reapWait after the exit when
// nobody does, so that a stopped VM's pid is gone as after a Stop of a
// child. Its exit status is its parent's.
func adoptProcess(h *vmm.Handle) *process {
	released := make(chan struct{})
	var once sync.Once
	p := &process{id: h.Process(), done: make(chan struct{}), sig: h.Signal}
	p.release = func() {
		once.Do(func() { close(released) })
		h.Close()
	}
	go func() {
		defer close(p.done)
		<-h.Done()
		select {
		case <-released:
			return // the handle was closed, the process runs on
		default:
		}
		waitReaped(p.id, reapWait)
	}()
	return p
}

// waitReaped polls until no process has id any more (a zombie still has
// it), for at most d.
func waitReaped(id vmm.Process, d time.Duration) {
	deadline := time.Now().Add(d)
	delay := time.Millisecond
	for !reaped(id) && time.Now().Before(deadline) {
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// reaped reports whether id's process is gone, zombie included: its pid
// names no process, or another one.
func reaped(id vmm.Process) bool {
	if err := syscall.Kill(id.PID, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	now, err := vmm.Identify(id.PID)
	return err == nil && now.StartTime != id.StartTime
}

func (p *process) pid() int { return p.id.PID }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has already exited.
func (p *process) signal(sig syscall.Signal) error { return p.sig(sig) }

// waitFor reports whether the process exited within d, cut short by ctx.
func (p *process) waitFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return p.exited()
}

// cleanup is a LIFO stack of release functions that runs once.
type cleanup struct {
	mu   sync.Mutex
	fns  []func() error
	once sync.Once
	err  error
}

func (c *cleanup) add(f func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, f)
}

// run calls the functions, last added first, and joins their errors. Later
// calls return the first call's result.
func (c *cleanup) run() error {
	c.once.Do(func() {
		c.mu.Lock()
		fns := c.fns
		c.fns = nil
		c.mu.Unlock()
		var errs []error
		for i := len(fns) - 1; i >= 0; i-- {
			errs = append(errs, fns[i]())
		}
		c.err = errors.Join(errs...)
	})
	return c.err
}
