package portproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// fakeSandboxes has one running sandbox, "sb-1", whose port 80 is served
// by an httptest server; its other ports are closed.
type fakeSandboxes struct {
	upstream string // host:port of the httptest server

	mu      sync.Mutex
	paused  bool // sb-paused is paused until resumed
	resumes int
}

func (f *fakeSandboxes) Get(ctx context.Context, id string) (sandbox.Info, error) {
	switch id {
	case "sb-1", "sb-other":
		return sandbox.Info{ID: id, State: sandbox.StateRunning}, nil
	case "sb-paused":
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.paused {
			return sandbox.Info{ID: id, State: sandbox.StatePaused}, nil
		}
		return sandbox.Info{ID: id, State: sandbox.StateRunning}, nil
	case "sb-failed":
		return sandbox.Info{ID: id, State: sandbox.StateFailed}, nil
	}
	return sandbox.Info{}, fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
}

func (f *fakeSandboxes) Resume(ctx context.Context, id string) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != "sb-paused" || !f.paused {
		return sandbox.Info{}, sandbox.ErrNotRunning
	}
	f.paused = false
	f.resumes++
	return sandbox.Info{ID: id, State: sandbox.StateRunning}, nil
}

func (f *fakeSandboxes) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port != 80 {
		return nil, fmt.Errorf("%w: port %d: connection refused", channel.ErrPortClosed, port)
	}
	return (&net.Dialer{}).DialContext(ctx, "tcp", f.upstream)
}

type fakeAuth struct{}

func (fakeAuth) Authenticate(r *http.Request) error {
	if r.Header.Get("Authorization") == "Bearer ab_key" {
		return nil
	}
	return ErrUnauthorized
}

// newTestProxy returns the proxy in front of a 418 "api" handler, and the
// upstream's record of the last request it got.
func newTestProxy(t *testing.T) (*Proxy, http.Handler, *http.Request) {
	t.Helper()
	var last http.Request
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last = *r.Clone(context.Background())
		fmt.Fprintf(w, "guest %s", r.URL.RequestURI())
	}))
	t.Cleanup(up.Close)
	p, err := New(Options{Sandboxes: &fakeSandboxes{upstream: up.Listener.Addr().String(), paused: true}, Auth: fakeAuth{},
		Domain: "sb.example", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	return p, p.Wrap(api), &last
}

func do(h http.Handler, method, url string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestRouting(t *testing.T) {
	_, h, _ := newTestProxy(t)
	cases := []struct {
		name, method, url string
		want              int
		body              string
	}{
		{"host-based", "GET", "http://80-sb-1.sb.example/a?b=1", 200, "guest /a?b=1"},
		{"host-based with port", "GET", "http://80-sb-1.sb.example:7070/", 200, "guest /"},
		{"path-based", "GET", "http://h/v1/sandboxes/sb-1/ports/80/x/y", 200, "guest /x/y"},
		{"path-based root", "GET", "http://h/v1/sandboxes/sb-1/ports/80/", 200, "guest /"},
		{"api: port access", "GET", "http://h/v1/sandboxes/sb-1/ports/80", 418, ""},
		{"api: share link", "POST", "http://h/v1/sandboxes/sb-1/ports/80/links", 418, ""},
		{"api: other", "GET", "http://h/v1/sandboxes", 418, ""},
		{"other host", "GET", "http://80-sb-1.other.example/", 418, ""},
		{"bad port", "GET", "http://0-sb-1.sb.example/", 418, ""},
		{"closed port", "GET", "http://81-sb-1.sb.example/", 502, "Nothing in sandbox sb-1 accepts connections on port 81"},
		{"unknown sandbox", "GET", "http://80-sb-2.sb.example/", 404, ""},
		{"paused sandbox is resumed", "GET", "http://80-sb-paused.sb.example/", 200, "guest /"},
		{"failed sandbox", "GET", "http://80-sb-failed.sb.example/", 409, "failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(h, tc.method, tc.url, map[string]string{"Authorization": "Bearer ab_key"})
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), tc.want, tc.body)
			}
		})
	}
}

// TestShareLinksByOptionsNow: share links are made and checked by
// Options.Now, so a clock moved to a link's expiry expires it.
func TestShareLinksByOptionsNow(t *testing.T) {
	now := time.Unix(1700000000, 0)
	p, err := New(Options{Sandboxes: &fakeSandboxes{}, DataDir: t.TempDir(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	share, exp, err := p.ShareToken("sb-1", 80, time.Hour)
	if err != nil || !exp.Equal(now.Add(time.Hour)) {
		t.Fatalf("got expiry %v, %v; want %v", exp, err, now.Add(time.Hour))
	}
	if v, _ := p.sign.check(share, "sb-1", 80); v != valid {
		t.Errorf("before its expiry: got verdict %d, want valid", v)
	}
	now = exp
	if v, _ := p.sign.check(share, "sb-1", 80); v != expired {
		t.Errorf("at its expiry: got verdict %d, want expired", v)
	}
}

func TestCredentials(t *testing.T) {
	p, h, last := newTestProxy(t)
	const u = "http://80-sb-1.sb.example/"
	tok := p.Token("sb-1")
	share, _, err := p.ShareToken("sb-1", 80, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherPort, _, _ := p.ShareToken("sb-1", 81, time.Hour)
	p.sign.now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	old, _, _ := p.ShareToken("sb-1", 80, time.Hour)
	p.sign.now = time.Now
	cases := []struct {
		name string
		url  string
		hdr  map[string]string
		want int
	}{
		{"none", u, nil, 401},
		{"api key", u, map[string]string{"Authorization": "Bearer ab_key"}, 200},
		{"wrong key", u, map[string]string{"Authorization": "Bearer ab_nope"}, 401},
		{"token bearer", u, map[string]string{"Authorization": "Bearer " + tok}, 200},
		{"token header", u, map[string]string{TokenHeader: tok}, 200},
		{"token of another sandbox", u, map[string]string{TokenHeader: p.Token("sb-2")}, 401},
		{"token query", u + "?token=" + tok, nil, 200},
		{"token cookie", u, map[string]string{"Cookie": CookieName + "=" + tok}, 200},
		{"share link", u + "?token=" + share, nil, 200},
		{"share link of another port", u + "?token=" + otherPort, nil, 401},
		{"expired share link", u + "?token=" + old, nil, 403},
		{"forged share link", u + "?token=" + strings.Replace(share, "abs_", "abs_9", 1), nil, 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if rec := do(h, "GET", tc.url, tc.hdr); rec.Code != tc.want {
				t.Errorf("got %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
		})
	}
	t.Run("query becomes cookie, credentials stripped", func(t *testing.T) {
		rec := do(h, "GET", u+"x?token="+share+"&a=1", map[string]string{"Authorization": "Bearer ab_key",
			TokenHeader: tok, "Cookie": CookieName + "=" + tok + "; app=2"})
		if rec.Code != 200 {
			t.Fatalf("got %d", rec.Code)
		}
		c := rec.Result().Cookies()
		if len(c) != 0 {
			t.Errorf("got cookies %v; the API key authorized, no cookie needed", c)
		}
		if got := last.URL.RequestURI(); got != "/x?a=1" {
			t.Errorf("guest saw %q, want /x?a=1", got)
		}
		if last.Header.Get("Authorization") != "" || last.Header.Get(TokenHeader) != "" || last.Header.Get("Cookie") != "app=2" {
			t.Errorf("guest saw headers %v", last.Header)
		}
	})
	t.Run("cookie from query", func(t *testing.T) {
		rec := do(h, "GET", "http://h/v1/sandboxes/sb-1/ports/80/?token="+share, nil)
		c := rec.Result().Cookies()
		if rec.Code != 200 || len(c) != 1 || c[0].Value != share || c[0].Path != "/v1/sandboxes/sb-1/ports/80/" || !c[0].HttpOnly {
			t.Errorf("got %d, cookies %+v", rec.Code, c)
		}
	})
	t.Run("public", func(t *testing.T) {
		if err := p.SetPublic("sb-1", 80, true); err != nil {
			t.Fatal(err)
		}
		if rec := do(h, "GET", u, nil); rec.Code != 200 {
			t.Errorf("public: got %d", rec.Code)
		}
		// The setting survives a restart.
		p2, err := New(Options{Sandboxes: p.sbx, DataDir: p.public.path[:strings.LastIndex(p.public.path, "/")]})
		if err != nil {
			t.Fatal(err)
		}
		if !p2.Public("sb-1", 80) || p2.Token("sb-1") != tok {
			t.Errorf("after a restart: public %v, same token %v", p2.Public("sb-1", 80), p2.Token("sb-1") == tok)
		}
		if err := p.SetPublic("sb-1", 80, false); err != nil {
			t.Fatal(err)
		}
		if rec := do(h, "GET", u, nil); rec.Code != 401 {
			t.Errorf("private again: got %d", rec.Code)
		}
	})
}

func TestStreamingNotBuffered(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		<-release
		io.WriteString(w, "second\n")
	}))
	defer up.Close()
	p, err := New(Options{Sandboxes: &fakeSandboxes{upstream: up.Listener.Addr().String()}, DataDir: t.TempDir(), Domain: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetPublic("sb-1", 80, true); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Wrap(http.NotFoundHandler()))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/sandboxes/sb-1/ports/80/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first\n" {
		t.Fatalf("got %q, %v", buf, err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "second\n" {
		t.Errorf("got %q", rest)
	}
}

func TestMatchHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		ok   bool
		id   string
		port int
	}{
		{"8000-sb-abc.example.com", true, "sb-abc", 8000},
		{"8000-SB-ABC.Example.com:443", true, "sb-abc", 8000},
		{"8000-sb-abc.example.com.", true, "sb-abc", 8000},
		{"08000-sb-abc.example.com", false, "", 0},
		{"x.8000-sb-abc.example.com", false, "", 0},
		{"example.com", false, "", 0},
		{"8000.example.com", false, "", 0},
		{"70000-sb.example.com", false, "", 0},
	} {
		got, ok := matchHost(tc.host, "example.com")
		if ok != tc.ok || got.sandbox != tc.id || got.port != tc.port {
			t.Errorf("matchHost(%q): got %+v %v, want %s %d %v", tc.host, got, ok, tc.id, tc.port, tc.ok)
		}
	}
}

func TestResumeOnce(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	f := &fakeSandboxes{upstream: up.Listener.Addr().String(), paused: true}
	p, err := New(Options{Sandboxes: f, Auth: fakeAuth{}, Domain: "x", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Wrap(http.NotFoundHandler())
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = do(h, "GET", "http://80-sb-paused.x/", map[string]string{"Authorization": "Bearer ab_key"}).Code
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d: got %d, want 200", i, c)
		}
	}
	if f.resumes != 1 {
		t.Errorf("got %d resumes, want 1", f.resumes)
	}
}
