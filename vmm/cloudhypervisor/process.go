package cloudhypervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

// process is one running cloud-hypervisor. Its exit is observed by a single
// goroutine that calls cmd.Wait and then closes done.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit error; written before done is closed
}

// startProcess runs bin with args, its stdout and stderr going to logPath.
// The process is not tied to any context or to hostd: it lives until stop
// (vmm.StartProcess).
func startProcess(bin string, args, env []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cloudhypervisor: open log: %w", err)
	}
	defer logf.Close() // the child keeps its own copy

	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	// The VMM lifetime policy is vmm's (it outlives hostd; this backend
	// cannot adopt it yet, so Release stops it).
	if err := vmm.StartProcess(cmd); err != nil {
		return nil, fmt.Errorf("cloudhypervisor: start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has already been reaped.
func (p *process) signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("cloudhypervisor: signal %v: %w", sig, err)
	}
	return nil
}

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
