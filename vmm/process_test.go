package vmm

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHandle: a process opened by pid and start time is signalled through
// its pidfd and Done closes at its exit; a wrong start time, or a process
// that exited, is ErrProcessGone; Close lets go of a live one.
func TestHandle(t *testing.T) {
	start := func() (*exec.Cmd, Process) {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		p, err := Identify(cmd.Process.Pid)
		if err != nil || !p.Alive() {
			t.Fatalf("identify: %v %v", p, err)
		}
		return cmd, p
	}
	cmd, p := start()
	if _, err := OpenProcess(Process{PID: p.PID, StartTime: p.StartTime + 1}); !errors.Is(err, ErrProcessGone) {
		t.Errorf("open with another start time: got %v, want ErrProcessGone", err)
	}
	h, err := OpenProcess(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed after SIGKILL")
	}
	h.Close()
	_ = cmd.Wait()
	if p.Alive() {
		t.Error("a reaped process is alive")
	}
	if _, err := OpenProcess(p); !errors.Is(err, ErrProcessGone) {
		t.Errorf("open of a reaped process: got %v, want ErrProcessGone", err)
	}
	_, p2 := start()
	h2, err := OpenProcess(p2)
	if err != nil {
		t.Fatal(err)
	}
	h2.Close()
	if !p2.Alive() {
		t.Error("Close ended the process")
	}
	if err := h2.Signal(syscall.SIGKILL); err != nil || !p2.Alive() {
		t.Errorf("signal after Close: %v (alive %v), want nothing sent", err, p2.Alive())
	}
}

// TestHandleOfAProcessThatJustExited: a handle whose process has exited
// (here a zombie already) and whose readiness the poller took before the
// watch's first Read (beforeWatch lets it) still closes Done. The poller's
// readiness is edge-triggered and Read resets it, so the watch must ask
// the pidfd itself; without that this test hung (TestHandle did once, in
// CI, under load).
func TestHandleOfAProcessThatJustExited(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), uintptr(syscall.O_NONBLOCK), 0)
	if errno != 0 {
		t.Fatalf("pidfd_open: %v", errno)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; { // until it is a zombie (not reaped: no Wait)
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err == nil && strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never became a zombie: %q, %v", pid, b, err)
		}
		time.Sleep(time.Millisecond)
	}
	polled := make(chan error, 1)
	beforeWatch = func() { polled <- pollerRan() } // the poller sees the exit first
	t.Cleanup(func() { beforeWatch = nil })
	h, err := watchPidfd(Process{PID: pid}, fd)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed for a process that had exited")
	}
}

// pollerRan returns once the runtime's poller has taken the readiness of
// every file that was ready when it was called: a read of a pipe waits in
// the poller, the pipe is written, and the read wakes only from a poll
// that came after the write, which reports all that is ready at once.
func pollerRan() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	defer w.Close()
	rc, err := r.SyscallConn()
	if err != nil {
		return err
	}
	asked := make(chan struct{})
	woke := make(chan error, 1)
	go func() {
		first := true
		woke <- rc.Read(func(uintptr) bool {
			if first { // not ready: the read waits in the poller
				first = false
				close(asked)
				return false
			}
			return true
		})
	}()
	<-asked
	if _, err := w.Write([]byte{0}); err != nil {
		return err
	}
	select {
	case err := <-woke:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("the poller never reported a written pipe")
	}
}
