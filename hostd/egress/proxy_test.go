package egress_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/internal/nettest"
)

// env is a proxy serving listeners in a client namespace of the test's own,
// with the test upstream in another (no packet leaves the machine).
type env struct {
	t      *testing.T
	up     *nettest.Upstream
	proxy  *egress.Proxy
	ca     *egress.CA
	ns     string
	events chan egress.Event
}

type secrets map[string]string

func (s secrets) SecretValue(_ context.Context, name string) ([]byte, error) {
	v, ok := s[name]
	if !ok {
		return nil, errors.New("no such secret")
	}
	return []byte(v), nil
}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with the proxy's options changed by set.
func newEnvWith(t *testing.T, set func(*egress.Options)) *env {
	up := nettest.NewWithoutSinks(t)
	e := &env{t: t, up: up, ns: "abtest-eg-" + strings.ReplaceAll(up.IP.String(), ".", ""), events: make(chan egress.Event, 1000)}
	if err := netns.InNew(e.ns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(e.ns) })
	ca, err := egress.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.ca = ca
	opts := egress.Options{CA: ca, Hosts: up.Hosts(), UpstreamRootsPEM: up.CA.PEM,
		AnswerAddr: net.IPv4(10, 0, 0, 1), Secrets: secrets{"gh": "s3cr3t-value"},
		Recorder: egress.RecorderFunc(func(ev egress.Event) {
			select {
			case e.events <- ev:
			default: // a flood's events are not what its test reads
			}
		}), Logger: slog.New(slog.DiscardHandler)}
	if set != nil {
		set(&opts)
	}
	e.proxy, err = egress.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// attach serves box id on ip:port (TCP) and ip:53 (DNS) in the namespace.
func (e *env) attach(id, ip string, port int, pol egress.Policy) {
	var ls egress.Listeners
	err := netns.Do(e.ns, func() (err error) {
		a := net.ParseIP(ip)
		if ls.TCP, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: a, Port: port}); err != nil {
			return err
		}
		if ls.DNSTCP, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: a, Port: 53}); err != nil {
			return err
		}
		ls.DNSUDP, err = net.ListenUDP("udp4", &net.UDPAddr{IP: a, Port: 53})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.proxy.Attach(id, pol, ls); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { e.proxy.Detach(id) })
}

// dial connects from inside the client namespace.
func (e *env) dial(addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(e.ns, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

func (e *env) client(addr string) *http.Client {
	roots := e.up.CA.Pool()
	roots.AppendCertsFromPEM(e.ca.CertPEM())
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return e.dial(addr) },
	}}
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestProxyHTTP(t *testing.T) {
	e := newEnv(t)
	e.attach("h", "127.0.0.2", 80, egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"*.allowed.test", "allowed.test"}})
	c := e.client("127.0.0.2:80")
	for _, tc := range []struct {
		url        string
		wantStatus int
		wantBody   string
	}{
		{"http://allowed.test/a", 200, "hello from upstream allowed.test"},
		{"http://api.allowed.test/b", 200, "hello from upstream api.allowed.test"},
		{"http://denied.test/c", 403, "request to denied.test denied"},
		{"http://" + e.up.IP.String() + "/d", 403, "denied"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			status, body, err := get(t, c, tc.url)
			if err != nil || status != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
				t.Errorf("got %d %q %v, want %d %q", status, body, err, tc.wantStatus, tc.wantBody)
			}
		})
	}
	if err := e.proxy.SetPolicy("h", egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"denied.test"}}); err != nil {
		t.Fatal(err)
	}
	if status, _, err := get(t, c, "http://denied.test/now"); err != nil || status != 200 {
		t.Errorf("after SetPolicy: %d %v, want 200", status, err)
	}
	if status, _, _ := get(t, c, "http://allowed.test/now"); status != 403 {
		t.Errorf("after SetPolicy allowed.test: %d, want 403", status)
	}
	for _, r := range e.up.Requests() {
		if r.Path == "/c" || r.Path == "/d" {
			t.Errorf("a denied request reached the upstream: %+v", r)
		}
	}
}

func TestProxyPortDenied(t *testing.T) {
	e := newEnv(t)
	e.attach("p", "127.0.0.3", 8080, egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"*"}})
	// The reset may already come back from connect (loopback is quick).
	c, err := e.dial("127.0.0.3:8080")
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	if err == nil {
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 10)); err == nil || n > 0 {
			t.Errorf("read %d bytes, %v: want the connection reset", n, err)
		}
	}
	var ev egress.Event
	select {
	case ev = <-e.events:
	case <-time.After(time.Minute):
		t.Fatal("no event recorded")
	}
	if ev.Allowed || ev.Port != 8080 || !strings.Contains(ev.Rule, "port") {
		t.Errorf("event %+v", ev)
	}
}

func TestProxyTLS(t *testing.T) {
	e := newEnv(t)
	e.attach("s", "127.0.0.4", 443, egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"allowed.test"},
		Inject:       []egress.InjectRule{{Host: "inject.test", Header: "Authorization", Value: "Bearer {{secret:gh}}"}},
		Placeholders: map[string]string{"PH-gh-123": "gh"}})
	c := e.client("127.0.0.4:443")
	resp, err := c.Get("https://allowed.test/spliced")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "agentbox test upstream CA" {
		t.Errorf("spliced connection's certificate issued by %q, want the upstream's own", issuer)
	}
	status, _, err := get(t, c, "https://inject.test/api?t=PH-gh-123", "X-Token", "PH-gh-123")
	if err != nil || status != 200 {
		t.Fatalf("inject.test: %d %v", status, err)
	}
	var seen *nettest.Request
	for _, r := range e.up.Requests() {
		if r.Path == "/api" {
			seen = &r
		}
	}
	if seen == nil || seen.Header.Get("Authorization") != "Bearer s3cr3t-value" || seen.Header.Get("X-Token") != "s3cr3t-value" {
		t.Fatalf("upstream saw %+v", seen)
	}
	status, body, err := get(t, c, "https://denied.test/", "X-Token", "PH-gh-123")
	if err != nil || status != 403 || !strings.Contains(body, "denied") {
		t.Errorf("denied.test over TLS: %d %q %v, want 403", status, body, err)
	}
}

func TestProxyDNS(t *testing.T) {
	e := newEnv(t)
	e.attach("d", "127.0.0.5", 443, egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"*.github.com"}})
	ask := func(name string) *dns.Msg {
		var conn net.Conn
		if err := netns.Do(e.ns, func() (err error) {
			conn, err = net.Dial("udp", "127.0.0.5:53")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		dc := &dns.Conn{Conn: conn}
		if err := dc.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		r, err := dc.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask("api.github.com"); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.0.0.1" {
		t.Errorf("allowed name: %v", r)
	}
	if r := ask("github.com"); r.Rcode != dns.RcodeNameError {
		t.Errorf("github.com (not below *.github.com): rcode %d, want NXDOMAIN", r.Rcode)
	}
	if r := ask("evil.example"); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
		t.Errorf("denied name: %v", r)
	}
}
