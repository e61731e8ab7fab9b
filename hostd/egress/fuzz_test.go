package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// helloConn records what a tls.Client writes and fails its reads, so a
// handshake yields exactly one ClientHello.
type helloConn struct {
	net.Conn
	w bytes.Buffer
}

func (c *helloConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *helloConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }

// clientHello is the ClientHello crypto/tls sends for server name sni.
func clientHello(sni string, cfg *tls.Config) []byte {
	c := &helloConn{}
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.ServerName = sni
	_ = tls.Client(c, cfg).Handshake()
	return c.w.Bytes()
}

// FuzzPeekClientHello feeds the SNI peek any first bytes of a guest TLS
// connection: it returns a ServerName only with the exact bytes it read
// (a prefix of the input, replayed to the upstream), or an error.
func FuzzPeekClientHello(f *testing.F) {
	f.Add(clientHello("api.github.com", nil))
	f.Add(clientHello("a.b", &tls.Config{MaxVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}))
	f.Add(clientHello("", nil))
	f.Add([]byte{0x16, 0x03, 0x01, 0xff, 0xff})
	f.Add([]byte("\x16\x03\x01\x00\x05hello"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		hello, raw, err := peekClientHello(bytes.NewReader(data))
		if hello == nil {
			if err == nil {
				t.Fatal("no hello and no error")
			}
			return
		}
		if !bytes.HasPrefix(data, raw) {
			t.Fatalf("replay bytes %q are not what the guest sent", raw)
		}
		if strings.ContainsAny(hello.ServerName, "\x00/ \r\n") {
			t.Fatalf("server name %q", hello.ServerName)
		}
	})
}

// FuzzSNIRoundTrip: the name a real TLS client sends is the name the peek
// sees, whatever the name.
func FuzzSNIRoundTrip(f *testing.F) {
	for _, s := range []string{"api.github.com", "x", "UPPER.example", "a-b.c_d.e", "xn--bcher-kva.example", "1.2.3.4", "trailing.dot."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sni string) {
		hello := clientHello(sni, nil)
		if len(hello) == 0 {
			return // crypto/tls refused the name
		}
		got, _, err := peekClientHello(bytes.NewReader(hello))
		if err != nil && got == nil {
			t.Fatalf("peek of a real hello for %q: %v", sni, err)
		}
		// crypto/tls sends no SNI for an IP address (bracketed, with a
		// zone) and drops trailing dots.
		ip := sni
		if len(ip) >= 2 && ip[0] == '[' && ip[len(ip)-1] == ']' {
			ip = ip[1 : len(ip)-1]
		}
		if i := strings.LastIndex(ip, "%"); i > 0 {
			ip = ip[:i]
		}
		want := strings.TrimRight(sni, ".")
		if net.ParseIP(ip) != nil {
			want = ""
		}
		if got.ServerName != want && !strings.EqualFold(got.ServerName, want) {
			t.Fatalf("sent SNI %q, peek saw %q", sni, got.ServerName)
		}
	})
}

// fuzzProxy is a proxy whose box allows only allowed.test, served by a
// loopback upstream that records the Host of every request it gets.
type fuzzProxy struct {
	p     *Proxy
	b     *box
	port  int
	mu    sync.Mutex
	hosts []string
	evs   []Event
}

const allowedHost = "allowed.test"

func newFuzzProxy(f *testing.F) *fuzzProxy {
	fp := &fuzzProxy{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fp.mu.Lock()
		fp.hosts = append(fp.hosts, r.Host)
		fp.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "upstream")
	}))
	f.Cleanup(up.Close)
	fp.port = up.Listener.Addr().(*net.TCPAddr).Port
	ca, err := LoadOrCreateCA(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	fp.p, err = New(Options{CA: ca, Hosts: map[string]string{allowedHost: "127.0.0.1"}, AnswerAddr: net.IPv4(10, 0, 0, 1),
		Logger: slog.New(slog.DiscardHandler), Recorder: RecorderFunc(func(ev Event) {
			fp.mu.Lock()
			fp.evs = append(fp.evs, ev)
			fp.mu.Unlock()
		})})
	if err != nil {
		f.Fatal(err)
	}
	c, err := compile(Policy{Mode: ModeProxy, AllowDomains: []string{allowedHost}, AllowPorts: []int{fp.port}})
	if err != nil {
		f.Fatal(err)
	}
	fp.b = &box{id: "fuzz", conns: map[net.Conn]struct{}{}, transport: fp.p.newTransport()}
	fp.b.pol.Store(c)
	f.Cleanup(fp.b.transport.CloseIdleConnections)
	return fp
}

// normHost is the name part of a Host header as the policy compares it.
func normHost(h string) string {
	return strings.TrimSuffix(hostOnly(h), ".")
}

// serve runs one guest connection that sends data and half-closes, and
// returns what the proxy answered.
func (fp *fuzzProxy) serve(t *testing.T, data []byte) []byte {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	guest, err := net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	srv, err := l.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fp.p.serveHTTP(fp.b, srv, "http", "", fp.port)
	}()
	go func() {
		_, _ = guest.Write(data)
		_ = guest.CloseWrite()
	}()
	_ = guest.SetReadDeadline(time.Now().Add(time.Minute))
	out, err := io.ReadAll(guest)
	if err != nil {
		t.Fatalf("reading the proxy's answer: %v", err)
	}
	_ = guest.Close()
	<-done
	return out
}

// FuzzHTTPRequest sends the proxy any bytes as a guest's plain HTTP
// connection. Only requests for the allowed name reach the upstream (by
// the Host the upstream sees, however the guest spelled it: absolute URI,
// case, port, trailing dot); every request the proxy allows is audited
// with that name; what the proxy answers is HTTP.
func FuzzHTTPRequest(f *testing.F) {
	fp := newFuzzProxy(f)
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"GET http://evil.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
		"GET http://allowed.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: ALLOWED.test.:99\r\n\r\nGET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 100\r\n\r\nshort",
		"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n",
		"\x00\xff garbage",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fp.mu.Lock()
		fp.hosts, fp.evs = nil, nil
		fp.mu.Unlock()
		out := fp.serve(t, data)
		fp.mu.Lock()
		hosts, evs := fp.hosts, fp.evs
		fp.mu.Unlock()
		for _, h := range hosts {
			if normHost(h) != allowedHost {
				t.Fatalf("the upstream got a request for Host %q (input %q)", h, data)
			}
		}
		for _, ev := range evs {
			if ev.Allowed && strings.TrimSuffix(ev.Host, ".") != allowedHost {
				t.Fatalf("allowed request audited for host %q", ev.Host)
			}
		}
		if len(out) > 0 {
			if _, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil); err != nil {
				t.Fatalf("the proxy answered %q: %v", out, err)
			}
		}
	})
}

// dnsRecorder is a dns.ResponseWriter that keeps the message written.
type dnsRecorder struct {
	dns.ResponseWriter
	msg *dns.Msg
}

func (w *dnsRecorder) WriteMsg(m *dns.Msg) error { w.msg = m; return nil }

// FuzzDNS sends the proxy's DNS responder any query that unpacks: the
// answer packs, has the query's id, answers only names the policy allows
// and only with the proxy's own address.
func FuzzDNS(f *testing.F) {
	fp := newFuzzProxy(f)
	c, err := compile(Policy{Mode: ModeProxy, AllowDomains: []string{allowedHost, "*.wild.test"},
		Inject: []InjectRule{{Host: "inject.test", Header: "X-Key", Value: "v"}}})
	if err != nil {
		f.Fatal(err)
	}
	fp.b.pol.Store(c)
	for _, q := range []struct {
		name string
		typ  uint16
	}{{"allowed.test.", dns.TypeA}, {"ALLOWED.TEST.", dns.TypeAAAA}, {"evil.test.", dns.TypeA}, {"a.wild.test.", dns.TypeA},
		{"wild.test.", dns.TypeA}, {"inject.test.", dns.TypeTXT}, {".", dns.TypeANY}, {"allowed.test\\000.", dns.TypeA}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.typ)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	want := net.IPv4(10, 0, 0, 1)
	f.Fuzz(func(t *testing.T, data []byte) {
		req := new(dns.Msg)
		if req.Unpack(data) != nil {
			return
		}
		w := &dnsRecorder{}
		fp.p.serveDNS(fp.b, w, req)
		if w.msg == nil {
			t.Fatal("no answer")
		}
		if w.msg.Id != req.Id {
			t.Fatalf("answer id %d, query id %d", w.msg.Id, req.Id)
		}
		if _, err := w.msg.Pack(); err != nil {
			t.Fatalf("answer does not pack: %v", err)
		}
		for _, rr := range w.msg.Answer {
			a, ok := rr.(*dns.A)
			if !ok || !a.A.Equal(want) {
				t.Fatalf("answer %v", rr)
			}
			name := strings.ToLower(strings.TrimSuffix(a.Hdr.Name, "."))
			if _, ok := c.domainRule(name); !ok && len(c.injections(name)) == 0 {
				t.Fatalf("answered %q, which the policy does not allow", a.Hdr.Name)
			}
		}
	})
}

// FuzzPolicy: a policy that validates compiles, and its port and domain
// checks never panic on any host.
func FuzzPolicy(f *testing.F) {
	f.Add("proxy", "*.github.com", "10.0.0.0/8", 443, "x.github.com")
	f.Add("proxy", "*", "::/0", 1, "")
	f.Add("none", "a.b", "1.2.3.4/32", 65535, "A.B.")
	f.Add("proxy", "*.", "bad", 0, "x")
	f.Fuzz(func(t *testing.T, mode, domain, cidr string, port int, host string) {
		pol := Policy{Mode: Mode(mode), AllowDomains: []string{domain}, AllowCIDRs: []string{cidr}, AllowPorts: []int{port}}
		c, err := compile(pol)
		if err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("compile error %v does not wrap ErrInvalidPolicy", err)
			}
			return
		}
		if !c.portAllowed(port) {
			t.Fatalf("port %d listed but not allowed", port)
		}
		if rule, ok := c.domainRule(host); ok && rule != domain {
			t.Fatalf("rule %q", rule)
		}
		if _, ok := c.domainRule(domain); !ok && !strings.HasPrefix(domain, "*.") {
			t.Fatalf("domain %q does not match itself", domain)
		}
	})
}
