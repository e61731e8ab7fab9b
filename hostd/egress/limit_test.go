package egress_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/internal/fdbudget"
	"github.com/agentbox/agentbox/internal/logtest"
)

// hold opens n connections to addr from the client namespace and keeps
// them open (silent: the proxy waits for their first bytes) until the test
// ends.
func (e *env) hold(addr string, n int) {
	for range n {
		c, err := e.dial(addr)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { c.Close() })
	}
}

// refusedHTTP sends a request on a new connection to addr and returns the
// proxy's answer: a 503 naming the refusal.
func (e *env) refusedHTTP(addr string) (int, string) {
	e.t.Helper()
	c, err := e.dial(addr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("no answer past the cap: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyConnCap: a sandbox past its cap of concurrent connections gets
// a 503 that names the cap (port 80) or a reset (other ports, DNS over
// TCP); another sandbox still connects and is served.
func TestProxyConnCap(t *testing.T) {
	const cap = 8
	warns := &logtest.Counter{}
	e := newEnvWith(t, func(o *egress.Options) { o.MaxConnsPerSandbox, o.Logger = cap, slog.New(warns) })
	pol := egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"allowed.test"}, AllowPorts: []int{80, 8443}}
	e.attach("a", "127.0.0.2", 80, pol)
	e.attach("b", "127.0.0.3", 80, pol)
	e.attach("r", "127.0.0.4", 8443, pol)

	e.hold("127.0.0.2:80", cap)
	status, body := e.refusedHTTP("127.0.0.2:80")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "cap of 8 concurrent connections") {
		t.Errorf("past the cap: got %d %q, want 503 naming the cap", status, body)
	}
	if c, err := e.dial("127.0.0.2:53"); err == nil { // DNS over TCP shares the cap
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n > 0 || err == nil || isTimeout(err) {
			t.Errorf("DNS over TCP past the cap: read %d, %v; want it closed", n, err)
		}
		c.Close()
	}

	e.hold("127.0.0.4:8443", cap)
	expectReset(t, e, "127.0.0.4:8443")

	e.refusedHTTP("127.0.0.2:80")
	if n := warns.Warns(); n != 2 {
		t.Errorf("%d warnings for two sandboxes' refusals within a minute, want 2", n)
	}

	code, got, err := get(t, e.client("127.0.0.3:80"), "http://allowed.test/b")
	if err != nil || code != 200 || !strings.Contains(got, "hello from upstream") {
		t.Errorf("the other sandbox: got %d %q %v, want 200", code, got, err)
	}
}

// TestProxyFDBudget: once the host's descriptor budget is spent, every
// sandbox's new connections are refused, and the API, which takes nothing
// from the budget, still answers /healthz.
func TestProxyFDBudget(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(api.Close)
	open := countFDs(t)
	// Room for the two sandboxes' listeners, the test's own descriptors
	// and 10 connections of two descriptors each.
	budget := fdbudget.New(open+8+2*10+2, 0)
	e := newEnvWith(t, func(o *egress.Options) { o.Budget = budget })
	pol := egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"allowed.test"}}
	e.attach("a", "127.0.0.2", 80, pol)
	e.attach("b", "127.0.0.3", 80, pol)

	// Each connection held costs the test one descriptor and the proxy one
	// (the budget counts two): a few past the budget are enough.
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatal("no refusal after 40 connections")
		}
		c, err := e.dial("127.0.0.2:80")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			if !strings.Contains(string(b), "budget of") {
				t.Errorf("refusal %q does not name the budget", b)
			}
			break
		}
	}
	if status, body := e.refusedHTTP("127.0.0.3:80"); status != http.StatusServiceUnavailable {
		t.Errorf("the other sandbox past the host's budget: got %d %q, want 503", status, body)
	}
	resp, err := http.Get(api.URL + "/healthz")
	if err != nil {
		t.Fatalf("/healthz with the budget spent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz: got %d, want 200", resp.StatusCode)
	}
}

func expectReset(t *testing.T, e *env, addr string) {
	t.Helper()
	c, err := e.dial(addr)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatal(err)
		}
		return
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n > 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("past the cap on %s: read %d, %v; want a reset", addr, n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
