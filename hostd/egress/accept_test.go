package egress

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/logtest"
)

// TestAcceptSurvivesEMFILE runs itself in a child that uses up its
// descriptors: the accept loop waits out EMFILE, without ending, and takes
// the queued connection once a descriptor is free.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	if os.Getenv("EGRESS_EMFILE_CHILD") == "1" {
		fmt.Println(emfileChild())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptSurvivesEMFILE$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGRESS_EMFILE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child: ok") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func emfileChild() string {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return "child: " + err.Error()
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String()) // queued until accepted
	if err != nil {
		return "child: " + err.Error()
	}
	defer c.Close()
	rl := syscall.Rlimit{Cur: 256, Max: 256}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return "child: setrlimit: " + err.Error()
	}
	var fill []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break // EMFILE
		}
		fill = append(fill, f)
	}
	got := make(chan error, 1)
	logs := &logtest.Counter{}
	retrying := logs.Seen("egress accept failed; retrying")
	log := slog.New(logs)
	go func() {
		s, err := acceptTCP(l, log, "child")
		if err == nil {
			s.Close()
		}
		got <- err
	}()
	select { // the accept met EMFILE and backs off, or returned
	case err := <-got:
		return fmt.Sprintf("child: accept returned at EMFILE: %v", err)
	case <-retrying:
	}
	fill[0].Close()
	select {
	case err := <-got:
		if err != nil {
			return "child: accept: " + err.Error()
		}
	case <-time.After(10 * time.Second):
		return "child: no accept once a descriptor was free"
	}
	return "child: ok"
}
