package guestinit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

const signalChildEnv = "AGENTBOX_TEST_SIGNAL_CHILD"

// TestSignalChild is the child of TestIgnoreSignals: it ignores signals the
// way PID 1 does, then answers each line of stdin until stdin closes.
func TestSignalChild(t *testing.T) {
	if os.Getenv(signalChildEnv) != "1" {
		t.Skip("helper process of TestIgnoreSignals")
	}
	stop := ignoreSignals()
	defer stop()
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "child":
			// A command started by the agent must still die of SIGTERM.
			err := exec.Command("/bin/sh", "-c", "kill -TERM $$; sleep 5").Run()
			fmt.Println("child:", err)
		default:
			fmt.Println("ok", sc.Text())
		}
	}
	os.Exit(0)
}

// TestIgnoreSignals sends a process that called ignoreSignals every signal
// a guest process can send PID 1, the asynchronous SIGSEGV and SIGBUS
// included; it must still answer, and its own children must still get the
// default dispositions.
func TestIgnoreSignals(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalChild$")
	cmd.Env = append(os.Environ(), signalChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	out := bufio.NewScanner(stdout)
	line := func() string {
		if !out.Scan() {
			t.Fatalf("child ended: %v (%v)", out.Err(), cmd.Wait())
		}
		return out.Text()
	}
	if l := line(); l != "ready" {
		t.Fatalf("child said %q", l)
	}
	caught := caughtSignals(t, cmd.Process.Pid)
	for _, must := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGABRT} {
		if caught&(1<<(must-1)) == 0 {
			t.Errorf("%v has no handler", must)
		}
	}
	for _, s := range catchable() {
		// The kernel gives PID 1 only the signals it has a handler for;
		// the others (glibc's 32 and 33 under cgo here) never reach it.
		if caught&(1<<(s.(syscall.Signal)-1)) == 0 {
			continue
		}
		if err := cmd.Process.Signal(s); err != nil {
			t.Fatalf("send %v: %v", s, err)
		}
		fmt.Fprintf(stdin, "after %d\n", s)
		if l := line(); l != fmt.Sprintf("ok after %d", s.(syscall.Signal)) {
			t.Fatalf("after %v the child said %q", s, l)
		}
	}
	for _, s := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGSEGV, syscall.SIGBUS} {
		_ = cmd.Process.Signal(s)
	}
	fmt.Fprintln(stdin, "child")
	if l := line(); !strings.Contains(l, "signal: terminated") {
		t.Fatalf("a command of the agent did not die of SIGTERM: %q", l)
	}
}

// caughtSignals is the SigCgt mask of process pid: bit n-1 is signal n.
func caughtSignals(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no SigCgt")
	return 0
}
