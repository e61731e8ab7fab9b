//go:build vm

package hostd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// svcEnv is a hostd with host-based service URLs under "localhost" (which
// browsers resolve to loopback themselves) and one sandbox running a web
// server on port 8000 and guestsvc on port 9000.
type svcEnv struct {
	c    *client.Client
	addr string // hostd's host:port
	sb   client.Sandbox
	tok  string
	// http reaches any Host through hostd, whatever the name resolves to.
	http *http.Client
	// clock is what hostd's share links expire by.
	clock *aheadClock
}

// aheadClock is time.Now moved ahead by what a test adds: a share link
// expires when the test says, not after a wait.
type aheadClock struct{ ahead atomic.Int64 }

func (c *aheadClock) now() time.Time          { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *aheadClock) advance(d time.Duration) { c.ahead.Add(int64(d)) }

const svcDomain = "localhost"

// startSvcHostd is startHostd with a domain and share links on clock; it
// returns the bound address.
func startSvcHostd(t *testing.T, clock *aheadClock) (*client.Client, string) {
	t.Helper()
	u, stop := runHostd(t, vmmtest.ShortTempDir(t), func(cfg *hostd.Config) { cfg.Domain, cfg.Now = svcDomain, clock.now })
	t.Cleanup(stop)
	c, err := client.New(u, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return c, strings.TrimPrefix(u, "http://")
}

func newSvcEnv(t *testing.T) *svcEnv {
	t.Helper()
	clock := &aheadClock{}
	c, addr := startSvcHostd(t, clock)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := c.DeleteSandbox(context.Background(), sb.ID); err != nil {
			t.Errorf("delete sandbox: %v", err)
		}
	})
	e := &svcEnv{c: c, addr: addr, sb: sb, clock: clock}
	e.http = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	pa, err := c.PortAccess(ctx, sb.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	e.tok = pa.Token
	e.startServers(t)
	return e
}

// startServers starts python3's http.server on 8000 (serving /srv/www) and
// guestsvc on 9000, as background sessions, and waits until both answer.
func (e *svcEnv) startServers(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "guestsvc")
	build := exec.Command("go", "build", "-o", bin, "./ci/guestsvc")
	build.Dir, build.Env = "..", append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build guestsvc: %v\n%s", err, out)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := e.c.WriteFile(ctx, e.sb.ID, "/usr/local/bin/guestsvc", 0o755, f); err != nil {
		t.Fatal(err)
	}
	mustExec(t, e.c, e.sb.ID, "sh", "-c", "mkdir -p /srv/www && echo hello > /srv/www/hello.txt && echo world > /srv/www/world.txt")
	for _, cmd := range [][]string{
		{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/srv/www"},
		{"/usr/local/bin/guestsvc", "-listen", "127.0.0.1:9000"},
	} {
		if _, err := e.c.ExecBackground(ctx, e.sb.ID, client.ExecRequest{Cmd: cmd}); err != nil {
			t.Fatalf("start %v: %v", cmd, err)
		}
	}
	for _, port := range []int{8000, 9000} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := e.get(e.hostURL(port, "/"), map[string]string{"X-Agentbox-Token": e.tok})
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadGateway {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("port %d never answered: %v", port, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// hostURL is the host-based service URL of port with path.
func (e *svcEnv) hostURL(port int, path string) string {
	_, p, _ := net.SplitHostPort(e.addr)
	return fmt.Sprintf("http://%d-%s.%s:%s%s", port, e.sb.ID, svcDomain, p, path)
}

// pathURL is the path-based service URL of port with path.
func (e *svcEnv) pathURL(port int, path string) string {
	return fmt.Sprintf("http://%s/v1/sandboxes/%s/ports/%d%s", e.addr, e.sb.ID, port, path)
}

func (e *svcEnv) get(url string, headers map[string]string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error { b.cancel(); return b.ReadCloser.Close() }

// fetch GETs url and returns the status and body.
func (e *svcEnv) fetch(t *testing.T, url string, headers map[string]string) (int, string) {
	t.Helper()
	resp, err := e.get(url, headers)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// TestServiceURLsAndSessions boots one sandbox for service URLs (R10) and
// durable, interactive exec sessions (R2).
func TestServiceURLsAndSessions(t *testing.T) {
	e := newSvcEnv(t)
	tokHdr := map[string]string{"X-Agentbox-Token": e.tok}
	t.Run("host and path URLs", func(t *testing.T) {
		for _, u := range []string{e.hostURL(8000, "/"), e.pathURL(8000, "/")} {
			code, body := e.fetch(t, u, tokHdr)
			if code != 200 || !strings.Contains(body, "Directory listing for /") || !strings.Contains(body, "hello.txt") {
				t.Errorf("GET %s: got %d %q, want the directory listing", u, code, body)
			}
		}
		if code, body := e.fetch(t, e.pathURL(8000, "/hello.txt"), tokHdr); code != 200 || body != "hello\n" {
			t.Errorf("path URL file: got %d %q", code, body)
		}
	})
	t.Run("credentials", func(t *testing.T) { checkCredentials(t, e) })
	t.Run("nothing listening is 502", func(t *testing.T) {
		code, body := e.fetch(t, e.hostURL(8999, "/"), map[string]string{"X-Agentbox-Token": e.tok, "Accept": "text/html"})
		if code != http.StatusBadGateway || !strings.Contains(body, "Nothing listening") || !strings.Contains(body, "8999") {
			t.Errorf("got %d %q, want 502 with a page naming the port", code, body)
		}
	})
	t.Run("credentials never reach the guest", func(t *testing.T) { checkStripped(t, e) })
	t.Run("websocket echo", func(t *testing.T) { checkWebSocket(t, e) })
	t.Run("http2 cleartext", func(t *testing.T) { checkHTTP2(t, e) })
	t.Run("streaming is not buffered", func(t *testing.T) { checkUnbuffered(t, e) })
	t.Run("chromium", func(t *testing.T) { checkChromium(t, e) })
	t.Run("exec re-attach after a cut", func(t *testing.T) { checkReattach(t, e.c, e.sb.ID) })
	t.Run("exec background", func(t *testing.T) { checkBackground(t, e.c, e.sb.ID) })
	t.Run("exec pty", func(t *testing.T) { checkPTY(t, e.c, e.sb.ID) })
	t.Run("cli exec -it in a terminal", func(t *testing.T) { checkCLITerminal(t, e) })
	t.Run("a request resumes a paused sandbox", func(t *testing.T) { checkAutoResume(t, e) })
}

// checkAutoResume pauses the sandbox; a service-URL request resumes it, and
// the guest's server, restored with its memory, answers.
func checkAutoResume(t *testing.T, e *svcEnv) {
	ctx := context.Background()
	sb, err := e.c.Pause(ctx, e.sb.ID)
	if err != nil || sb.State != "paused" {
		t.Fatalf("pause: %+v, %v", sb, err)
	}
	code, body := e.fetch(t, e.hostURL(8000, "/hello.txt"), map[string]string{"X-Agentbox-Token": e.tok})
	if code != 200 || body != "hello\n" {
		t.Errorf("after pause: got %d %q, want the file", code, body)
	}
	if sb, err := e.c.GetSandbox(ctx, e.sb.ID); err != nil || sb.State != "running" {
		t.Errorf("after the request: %+v, %v; want running", sb, err)
	}
	if r := mustExec(t, e.c, e.sb.ID, "echo", "still here"); r.Stdout != "still here\n" {
		t.Errorf("exec after resume: %q", r.Stdout)
	}
}

func checkCredentials(t *testing.T, e *svcEnv) {
	ctx := context.Background()
	u := e.hostURL(8000, "/hello.txt")
	cases := []struct {
		name    string
		url     string
		headers map[string]string
		want    int
	}{
		{"none", u, nil, 401},
		{"wrong token", u, map[string]string{"X-Agentbox-Token": "abt_nope"}, 401},
		{"token of another sandbox shape", u + "?token=abs_1.x", nil, 401},
		{"api key", u, map[string]string{"Authorization": "Bearer " + testKey}, 200},
		{"token as bearer", u, map[string]string{"Authorization": "Bearer " + e.tok}, 200},
		{"token header", u, map[string]string{"X-Agentbox-Token": e.tok}, 200},
		{"token query", u + "?token=" + e.tok, nil, 200},
		{"path URL without credential", e.pathURL(8000, "/hello.txt"), nil, 401},
	}
	for _, tc := range cases {
		if code, body := e.fetch(t, tc.url, tc.headers); code != tc.want {
			t.Errorf("%s: got %d (%q), want %d", tc.name, code, body, tc.want)
		}
	}
	// ?token= becomes a cookie that opens later requests on its own.
	resp, err := e.get(u+"?token="+e.tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == "agentbox_token" {
			cookie = c.Name + "=" + c.Value
		}
	}
	if cookie == "" {
		t.Fatalf("no agentbox_token cookie after ?token=: %v", resp.Header)
	}
	if code, _ := e.fetch(t, u, map[string]string{"Cookie": cookie}); code != 200 {
		t.Errorf("with the cookie: got %d, want 200", code)
	}
	// Share links: valid, then expired (403).
	link, err := e.c.ShareLink(ctx, e.sb.ID, 8000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := e.fetch(t, e.hostURL(8000, "/?token="+link.Token), nil); code != 200 {
		t.Errorf("share link: got %d, want 200", code)
	}
	if code, _ := e.fetch(t, e.hostURL(9000, "/ping?token="+link.Token), nil); code != 401 {
		t.Errorf("share link of port 8000 on port 9000: got %d, want 401", code)
	}
	short, err := e.c.ShareLink(ctx, e.sb.ID, 8000, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.advance(time.Second) // the link's whole life
	if code, body := e.fetch(t, e.hostURL(8000, "/?token="+short.Token), nil); code != 403 {
		t.Errorf("expired share link: got %d %q, want 403", code, body)
	}
	// A public port needs nothing; private again, it does.
	if _, err := e.c.SetPortPublic(ctx, e.sb.ID, 8000, true); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.fetch(t, u, nil); code != 200 {
		t.Errorf("public port: got %d, want 200", code)
	}
	if _, err := e.c.SetPortPublic(ctx, e.sb.ID, 8000, false); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.fetch(t, u, nil); code != 401 {
		t.Errorf("private again: got %d, want 401", code)
	}
}

// checkStripped asks guestsvc what it received.
func checkStripped(t *testing.T, e *svcEnv) {
	code, body := e.fetch(t, e.hostURL(9000, "/headers?token="+e.tok+"&keep=1"), map[string]string{
		"Authorization": "Bearer " + testKey, "X-Agentbox-Token": e.tok, "Cookie": "agentbox_token=" + e.tok + "; app=1",
	})
	if code != 200 {
		t.Fatalf("got %d %q", code, body)
	}
	var got struct {
		URL     string              `json:"url"`
		Host    string              `json:"host"`
		Headers map[string][]string `json:"headers"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(body, testKey) || strings.Contains(body, e.tok) {
		t.Errorf("a credential reached the guest: %s", body)
	}
	if got.URL != "/headers?keep=1" || got.Headers["Cookie"] == nil || got.Headers["Cookie"][0] != "app=1" {
		t.Errorf("got url %q cookie %v, want the app's own query and cookie kept", got.URL, got.Headers["Cookie"])
	}
	if !strings.HasPrefix(got.Host, "9000-"+e.sb.ID+".") || got.Headers["X-Forwarded-Host"] == nil {
		t.Errorf("got host %q, forwarded %v", got.Host, got.Headers["X-Forwarded-Host"])
	}
}

func checkWebSocket(t *testing.T, e *svcEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(e.hostURL(9000, "/ws"), "http", "ws", 1), &websocket.DialOptions{
		HTTPClient: e.http, HTTPHeader: http.Header{"X-Agentbox-Token": {e.tok}},
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.CloseNow()
	for _, msg := range []string{"hello", strings.Repeat("x", 200<<10)} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		ws.SetReadLimit(1 << 20)
		_, got, err := ws.Read(ctx)
		if err != nil || string(got) != msg {
			t.Fatalf("echo: got %d bytes, %v; want %d", len(got), err, len(msg))
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

func checkHTTP2(t *testing.T, e *svcEnv) {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: p, DialContext: e.http.Transport.(*http.Transport).DialContext}, Timeout: time.Minute}
	req, _ := http.NewRequest(http.MethodGet, e.hostURL(9000, "/headers"), nil)
	req.Header.Set("X-Agentbox-Token", e.tok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("got %s %d %q, want HTTP/2 200", resp.Proto, resp.StatusCode, b)
	}
}

// checkUnbuffered reads /stream's first line, which guestsvc sends before
// it waits for /release: a buffering proxy would never deliver it.
func checkUnbuffered(t *testing.T, e *svcEnv) {
	resp, err := e.get(e.hostURL(9000, "/stream"), map[string]string{"X-Agentbox-Token": e.tok})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line: %q, %v", line, err)
	}
	if code, _ := e.fetch(t, e.hostURL(9000, "/release"), map[string]string{"X-Agentbox-Token": e.tok}); code != 200 {
		t.Fatalf("release: %d", code)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "second\n" {
		t.Errorf("second line: %q, %v", line, err)
	}
}
