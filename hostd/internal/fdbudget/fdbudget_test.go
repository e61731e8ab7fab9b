package fdbudget

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestDefaultReserve(t *testing.T) {
	for _, tc := range []struct{ limit, want int }{
		{20000, 2000}, {1 << 20, 1 << 20 / 10}, {4096, 1024}, {1024, 512}, {0, 0},
	} {
		if got := DefaultReserve(tc.limit); got != tc.want {
			t.Errorf("DefaultReserve(%d): got %d, want %d", tc.limit, got, tc.want)
		}
	}
}

// TestAcquireCountsOthers refuses once what the proxies hold and what the
// rest of the process has open (an injected count) reach the budget.
func TestAcquireCountsOthers(t *testing.T) {
	open := 100 // descriptors of the rest of the process
	b := New(1000, 200)
	b.count = func() (int, error) { return open + int(b.held.Load()), nil }
	got := 0
	for b.Acquire(2) {
		got += 2
	}
	if want := 800 - 100; got != want {
		t.Fatalf("acquired %d, want %d", got, want)
	}
	b.Release(10)
	if !b.Acquire(10) || b.Acquire(1) {
		t.Fatal("a release did not make exactly its room")
	}
	var nilb *Budget
	if !nilb.Acquire(1 << 20) {
		t.Fatal("a nil Budget refused")
	}
}

// TestBudgetUnderLoweredRlimit runs itself in a child whose RLIMIT_NOFILE
// is 400: descriptors taken within the budget stop at limit − reserve, and
// the reserve is still there to accept an API connection.
func TestBudgetUnderLoweredRlimit(t *testing.T) {
	if os.Getenv("FDBUDGET_CHILD") == "1" {
		fmt.Println(budgetChild())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBudgetUnderLoweredRlimit$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FDBUDGET_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child: ok") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func budgetChild() string {
	rl := syscall.Rlimit{Cur: 300, Max: 400}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return "child: setrlimit: " + err.Error()
	}
	b, err := FromRlimit()
	if err != nil {
		return "child: " + err.Error()
	}
	if b.Max() != 400-200 {
		return fmt.Sprintf("child: Max %d, want 200 (the soft limit raised to 400, half reserved)", b.Max())
	}
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for b.Acquire(1) {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return "child: open within the budget: " + err.Error()
		}
		held = append(held, f)
	}
	if n, _ := countOpen(); n > b.Max() || n < b.Max()-1 {
		return fmt.Sprintf("child: %d open at the refusal, want %d", n, b.Max())
	}
	// The API's listener still accepts: the reserve is untouched.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "child: listen: " + err.Error()
	}
	defer l.Close()
	for range 50 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return "child: dial: " + err.Error()
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			return "child: accept: " + err.Error()
		}
		defer s.Close()
	}
	return "child: ok"
}
