package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/vmm"
)

// hostdProc is a hostd run as a child process on a scratch data dir, so
// that its RSS is its own and it can be killed and started again on the
// same data dir and address.
type hostdProc struct {
	bin  string
	addr string
	dir  string // scratch dir: data/, hostd.log, the built binary
	c    *client.Client
	cmd  *exec.Cmd  // the running hostd
	done chan error // cmd's exit
	// reapEvery is hostd's -reap-interval.
	reapEvery time.Duration
	began     time.Time // when the soak started its first hostd
}

const apiKey = "ab_soak"

// startHostd runs bin (built from ./cmd/hostd when empty) with TCG unless
// AGENTBOX_ACCEL says, and waits for its API to answer.
func startHostd(ctx context.Context, bin string, reapEvery time.Duration) (*hostdProc, error) {
	dir, err := os.MkdirTemp("", "ab-soak-")
	if err != nil {
		return nil, err
	}
	h := &hostdProc{dir: dir, bin: bin, reapEvery: reapEvery, began: time.Now()}
	if h.bin == "" {
		h.bin = filepath.Join(dir, "hostd")
		progress("building hostd")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", h.bin, "./cmd/hostd").CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("go build ./cmd/hostd: %w: %s", err, out)
		}
	}
	if h.addr, err = freeAddr(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if h.c, err = client.New("http://"+h.addr, apiKey); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if _, err := h.start(ctx, ""); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

// dataDir is hostd's data directory.
func (h *hostdProc) dataDir() string { return filepath.Join(h.dir, "data") }

// start runs a new hostd process on the data dir (the previous one has
// exited), with AGENTBOX_FAULT=faultStep unless it is "", and returns how
// long it took to answer: its recovery (re-adopting the sandboxes) is done
// before it serves.
func (h *hostdProc) start(ctx context.Context, faultStep string) (time.Duration, error) {
	accel := os.Getenv("AGENTBOX_ACCEL")
	if accel == "" {
		accel = "tcg"
	}
	logf, err := os.OpenFile(filepath.Join(h.dir, "hostd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- soak: hostd starting (fault %q)\n", faultStep)
	cmd := exec.Command(h.bin, "-listen", h.addr, "-data-dir", h.dataDir(), "-vmm", "qemu", "-accel", accel,
		"-reap-interval", h.reapEvery.String())
	cmd.Env = append(os.Environ(), "AGENTBOX_API_KEY="+apiKey, fault.Env+"="+faultStep)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	h.cmd, h.done = cmd, make(chan error, 1)
	go func() { h.done <- cmd.Wait() }()
	if err := h.waitReady(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (h *hostdProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-h.done:
			h.done <- err
			return fmt.Errorf("hostd exited: %v (log: %s)", err, h.logTail())
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := h.c.Health(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("hostd did not answer within 2 min (log: %s)", h.logTail())
}

// kill sends SIGKILL to the hostd process soak started (by its pid) and
// waits for its exit.
func (h *hostdProc) kill() error {
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-h.done
	h.done <- nil
	return nil
}

// term stops hostd with SIGTERM (it leaves its sandboxes running for the
// next one) and reports how it exited.
func (h *hostdProc) term() error {
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-h.done:
		h.done <- err
		return err
	case <-time.After(2 * time.Minute):
		h.kill()
		return errors.New("hostd did not exit within 2 min of SIGTERM")
	}
}

// died waits up to d for hostd to exit on its own (at a fault point) and
// reports whether it did; if not, it is killed.
func (h *hostdProc) died(d time.Duration) bool {
	select {
	case err := <-h.done:
		h.done <- err
		return true
	case <-time.After(d):
		h.kill()
		return false
	}
}

// rssMiB is hostd's resident set size.
func (h *hostdProc) rssMiB() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for hostd")
}

// stop ends hostd with SIGTERM, SIGKILL after a minute, stops what a
// failed run left of the data dir (VMMs found by observe, by pidfd; the
// installation's namespaces) and removes the scratch dir.
func (h *hostdProc) stop() {
	h.shutdown()
	for p := range qemusOf(h.dataDir()) {
		if ph, err := vmm.OpenProcess(p); err == nil {
			progress("stopping vmm pid %d left by the soak", p.PID)
			_ = ph.Signal(syscall.SIGKILL)
			select {
			case <-ph.Done():
			case <-time.After(10 * time.Second):
			}
			ph.Close()
		}
	}
	if _, failed, err := netns.InstallationOf(h.dataDir()).Sweep(nil); err != nil || failed != nil {
		progress("namespaces left: %v %v", failed, err)
	}
	// One log per run (named by its start), so a later run does not
	// overwrite the log of one that failed.
	kept := filepath.Join(os.TempDir(), "ab-soak-hostd-"+h.began.Format("20060102-150405")+".log")
	if err := os.Rename(filepath.Join(h.dir, "hostd.log"), kept); err == nil {
		progress("hostd's log (every start) kept in %s", kept)
	}
	os.RemoveAll(h.dir)
}

// exited reports whether the hostd process has exited.
func (h *hostdProc) exited() bool {
	select {
	case err := <-h.done:
		h.done <- err
		return true
	default:
		return false
	}
}

// shutdown ends hostd with SIGTERM, SIGKILL after a minute.
func (h *hostdProc) shutdown() {
	if h.cmd == nil || h.cmd.Process == nil || h.exited() {
		return
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.done:
		h.done <- err
	case <-time.After(time.Minute):
		h.kill()
	}
}

func (h *hostdProc) logTail() string {
	b, _ := os.ReadFile(filepath.Join(h.dir, "hostd.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
