package cloudhypervisor

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
)

// The driver's tests run the real driver against a real process: this test
// binary, re-executed as a fake cloud-hypervisor that serves fakeCH on the
// --api-socket it is given. Its records go to a JSON-lines file that the
// test reads back.

// Environment of the fake process.
const (
	envFake       = "AGENTBOX_TEST_FAKE_CH"      // "1" turns the test binary into the fake
	envFakeLog    = "AGENTBOX_TEST_FAKE_LOG"     // JSON-lines records
	envFakeSpec   = "AGENTBOX_TEST_FAKE_SPEC"    // absolute path of the spec
	envFakeMode   = "AGENTBOX_TEST_FAKE_MODE"    // "", "stubborn" or "exit"
	envFakeFailOn = "AGENTBOX_TEST_FAKE_FAIL_ON" // endpoint=status
	envFakeUpIn   = "AGENTBOX_TEST_FAKE_UP_IN"   // the guest answers vsock after this duration
	envFakeGuest  = "AGENTBOX_TEST_FAKE_GUEST"   // "agent": a vmmtest.Guest serves vsock, not an echo
)

func TestMain(m *testing.M) {
	if os.Getenv(envFake) == "1" {
		os.Exit(fakeProcessMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeProcessMain is the fake cloud-hypervisor. It records its argv as an
// "argv" record, then serves the API until vmm.shutdown or a signal.
func fakeProcessMain(args []string) int {
	logf, err := os.OpenFile(os.Getenv(envFakeLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor:", err)
		return 2
	}
	var mu sync.Mutex
	emit := func(r fakeRecord) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(r)
		_, _ = logf.Write(append(b, '\n'))
	}
	if slices.Contains(args, "--kernel") {
		return fakeProbeBoot(args, os.Getenv(envFakeMode) == "probe-ok")
	}
	flags, why := parseFakeArgs(args)
	emit(fakeRecord{PID: os.Getpid(), Endpoint: "argv", Body: mustJSON(args), Violation: why})
	mode := os.Getenv(envFakeMode)
	if mode == "exit" {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor: exiting as told")
		return 3
	}
	if mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
	}
	s, err := loadSpec(os.Getenv(envFakeSpec))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor: spec:", err)
		return 2
	}
	if err := os.WriteFile(flags["--event-monitor"], []byte(`{"source":"vmm","event":"starting"}`+"\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor: event monitor:", err)
		return 2
	}
	opts := fakeOptions{stubborn: mode == "stubborn", emit: emit, onExit: func() { os.Exit(0) }}
	opts.guestUp, _ = time.ParseDuration(os.Getenv(envFakeUpIn))
	opts.agent = os.Getenv(envFakeGuest) == "agent"
	if ep, code, ok := strings.Cut(os.Getenv(envFakeFailOn), "="); ok {
		var n int
		fmt.Sscan(code, &n)
		opts.fail = map[string]int{ep: n}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: flags["--api-socket"], Net: "unix"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor:", err)
		return 2
	}
	f := newFakeCH(s, opts)
	if opts.agent && !opts.stubborn {
		// A guest's processes end with its VMM: kill them on SIGTERM.
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			f.closeGuest()
			os.Exit(143)
		}()
	}
	f.serve(l)
	return 0
}

// fakeProbeBoot plays a probe boot (see ProbeKVM): the guest prints the
// marker on its serial console when ok, and the VMM fails otherwise.
func fakeProbeBoot(args []string, ok bool) int {
	i := slices.Index(args, "--serial")
	serial, found := strings.CutPrefix(args[min(i+1, len(args)-1)], "file=")
	if i < 0 || !found || !strings.Contains(strings.Join(args, " "), "agentbox.probe=1") {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor: bad probe arguments", args)
		return 2
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor: KVM internal error")
		return 1
	}
	if err := os.WriteFile(serial, []byte("booting\n"+channel.ProbeMarker+"\n"), 0o600); err != nil {
		return 2
	}
	return 0
}

// parseFakeArgs reads the flags the driver passes, as "path=" values, and
// reports any it should not pass.
func parseFakeArgs(args []string) (map[string]string, string) {
	flags := map[string]string{}
	var bad []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--api-socket", "--event-monitor", "--seccomp":
			if i+1 == len(args) {
				bad = append(bad, a+" without a value")
				continue
			}
			i++
			v := args[i]
			if a != "--seccomp" {
				var ok bool
				if v, ok = strings.CutPrefix(v, "path="); !ok {
					bad = append(bad, a+" "+args[i])
				}
			}
			flags[a] = v
		case "-v":
		default:
			bad = append(bad, "unknown argument "+a)
		}
	}
	if flags["--seccomp"] != "true" {
		bad = append(bad, "seccomp is not on")
	}
	return flags, strings.Join(bad, "; ")
}

// fakeDriver returns a driver whose VMM is the fake, and the path of the
// fake's records. env adds to the fake's environment.
func fakeDriver(t *testing.T, env ...string) (*Driver, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := filepath.Abs(specPath)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "fake-ch.jsonl")
	d, err := New(Options{Binary: exe, DataDirs: []string{os.TempDir()}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	d.env = append([]string{
		envFake + "=1", envFakeLog + "=" + logPath, envFakeSpec + "=" + spec,
		"GORACE=atexit_sleep_ms=0", // under -race, a process otherwise lingers 1s at exit
	}, env...)
	t.Cleanup(func() {
		for _, r := range readRecords(t, logPath) {
			if r.Violation != "" {
				t.Errorf("fake cloud-hypervisor (pid %d): %s %s: %s", r.PID, r.Method, r.Endpoint, r.Violation)
			}
		}
	})
	return d, logPath
}

// readRecords reads the fake's records.
func readRecords(t *testing.T, path string) []fakeRecord {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []fakeRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r fakeRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("fake record %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// recordsOf returns the records of endpoint, in order.
func recordsOf(rs []fakeRecord, endpoint string) []fakeRecord {
	var out []fakeRecord
	for _, r := range rs {
		if r.Endpoint == endpoint {
			out = append(out, r)
		}
	}
	return out
}

// testLogger logs through t until the test's cleanups have run; later
// lines (from goroutines that outlive the test) are dropped.
func testLogger(t *testing.T) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}
