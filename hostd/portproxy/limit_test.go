package portproxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/internal/fdbudget"
	"github.com/agentbox/agentbox/internal/logtest"
)

// capEnv is a proxy whose sb-1 and sb-other serve port 80 (public) from an
// upstream whose /hold answers once the test ends, behind an API that
// answers /healthz.
func capEnv(t *testing.T, opts Options) *httptest.Server {
	t.Helper()
	done := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			w.WriteHeader(200)
			http.NewResponseController(w).Flush()
			<-done
		}
		io.WriteString(w, "guest "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(done) }) // before up.Close, which waits for /hold
	opts.Sandboxes = &fakeSandboxes{upstream: up.Listener.Addr().String()}
	opts.DataDir = t.TempDir()
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	for _, id := range []string{"sb-1", "sb-other"} {
		if err := p.SetPublic(id, 80, true); err != nil {
			t.Fatal(err)
		}
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api "+r.URL.Path) })
	srv := httptest.NewServer(p.Wrap(api))
	t.Cleanup(srv.Close)
	return srv
}

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServiceURLCap: a sandbox holding its cap of requests in flight gets
// a 503 that names the cap; another sandbox and the API still answer.
func TestServiceURLCap(t *testing.T) {
	const cap = 3
	warns := &logtest.Counter{}
	srv := capEnv(t, Options{MaxConnsPerSandbox: cap, Logger: slog.New(warns)})
	for range cap {
		resp, err := http.Get(srv.URL + "/v1/sandboxes/sb-1/ports/80/hold")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("holding request: %v %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
	}
	code, body := fetch(t, srv.URL+"/v1/sandboxes/sb-1/ports/80/a")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, fmt.Sprintf("cap of %d concurrent", cap)) {
		t.Errorf("past the cap: got %d %q, want 503 naming the cap", code, body)
	}
	for range 3 {
		fetch(t, srv.URL+"/v1/sandboxes/sb-1/ports/80/a")
	}
	if n := warns.Warns(); n != 1 {
		t.Errorf("%d warnings for 4 refusals within a minute, want 1", n)
	}
	if code, body := fetch(t, srv.URL+"/v1/sandboxes/sb-other/ports/80/a"); code != 200 || body != "guest /a" {
		t.Errorf("another sandbox: got %d %q, want 200", code, body)
	}
	if code, body := fetch(t, srv.URL+"/healthz"); code != 200 || body != "api /healthz" {
		t.Errorf("/healthz: got %d %q, want 200", code, body)
	}
}

// TestServiceURLBudget: with the host's descriptor budget spent, service
// URLs are refused and the API still answers.
func TestServiceURLBudget(t *testing.T) {
	budget := new(fdbudget.Budget)
	srv := capEnv(t, Options{Budget: budget})
	if code, _ := fetch(t, srv.URL+"/v1/sandboxes/sb-1/ports/80/a"); code != 200 {
		t.Fatalf("within the budget: got %d, want 200", code)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	srv = capEnv(t, Options{Budget: fdbudget.New(len(ents), 0)}) // spent at once
	code, body := fetch(t, srv.URL+"/v1/sandboxes/sb-1/ports/80/a")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "budget of") {
		t.Errorf("past the budget: got %d %q, want 503 naming the budget", code, body)
	}
	if code, body := fetch(t, srv.URL+"/healthz"); code != 200 || body != "api /healthz" {
		t.Errorf("/healthz: got %d %q, want 200", code, body)
	}
}
