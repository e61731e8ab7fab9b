package main

import (
	"context"
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
)

// hostdProc is a hostd run as a child process on a scratch data dir, so
// that its RSS is its own (and it could be killed and restarted).
type hostdProc struct {
	cmd  *exec.Cmd
	dir  string // scratch dir: data/, hostd.log, the built binary
	c    *client.Client
	done chan error
}

const apiKey = "ab_soak"

// startHostd runs bin (built from ./cmd/hostd when empty) with TCG unless
// AGENTBOX_ACCEL says, and waits for its API to answer.
func startHostd(ctx context.Context, bin string) (*hostdProc, error) {
	dir, err := os.MkdirTemp("", "ab-soak-")
	if err != nil {
		return nil, err
	}
	h := &hostdProc{dir: dir, done: make(chan error, 1)}
	if bin == "" {
		bin = filepath.Join(dir, "hostd")
		progress("building hostd")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hostd").CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("go build ./cmd/hostd: %w: %s", err, out)
		}
	}
	addr, err := freeAddr()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	accel := os.Getenv("AGENTBOX_ACCEL")
	if accel == "" {
		accel = "tcg"
	}
	logf, err := os.Create(filepath.Join(dir, "hostd.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	h.cmd = exec.Command(bin, "-listen", addr, "-data-dir", filepath.Join(dir, "data"), "-vmm", "qemu", "-accel", accel)
	h.cmd.Env = append(os.Environ(), "AGENTBOX_API_KEY="+apiKey)
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	if err := h.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { h.done <- h.cmd.Wait() }()
	if h.c, err = client.New("http://"+addr, apiKey); err != nil {
		h.stop()
		return nil, err
	}
	if err := h.waitReady(ctx); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
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
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("hostd did not answer within 2 min (log: %s)", h.logTail())
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

// stop ends hostd with SIGTERM (it stops its VMs), SIGKILL after a minute,
// and removes the scratch dir.
func (h *hostdProc) stop() {
	if h.cmd.Process != nil {
		h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(time.Minute):
			h.cmd.Process.Kill()
			<-h.done
		}
	}
	os.RemoveAll(h.dir)
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
