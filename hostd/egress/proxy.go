package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/agentbox/agentbox/hostd/internal/fdbudget"
)

// ErrUnknownSandbox is returned for a sandbox the proxy does not serve.
var ErrUnknownSandbox = errors.New("egress: unknown sandbox")

// Secrets gives the proxy the plaintext of a stored secret.
type Secrets interface {
	SecretValue(ctx context.Context, name string) ([]byte, error)
}

// Options configure a Proxy.
type Options struct {
	// CA terminates intercepted TLS. Required.
	CA *CA
	// Secrets resolves {{secret:NAME}} in injection rules.
	Secrets Secrets
	// Recorder receives every audit event; nil drops them.
	Recorder Recorder
	// Hosts maps upstream names to addresses, before the host's resolver.
	Hosts map[string]string
	// UpstreamRootsPEM, if set, are trusted for upstream TLS in addition to
	// the system roots (tests add their own CA).
	UpstreamRootsPEM []byte
	// AnswerAddr is what DNS answers for an allowed name: the proxy's
	// address inside the sandbox namespace.
	AnswerAddr net.IP
	// MaxConnsPerSandbox caps each sandbox's concurrent connections to
	// the proxy, DNS over TCP included (0: DefaultMaxConns); one past it
	// is refused at once.
	MaxConnsPerSandbox int
	// Budget, if set, is the host's file descriptors that the proxy's
	// connections take theirs from; a connection past it is refused.
	Budget *fdbudget.Budget
	Logger *slog.Logger
}

// Proxy serves every sandbox's listeners.
type Proxy struct {
	opts      Options
	log       *slog.Logger
	res       *resolver
	tlsConfig *tls.Config
	maxConns  int

	mu    sync.Mutex
	boxes map[string]*box
}

// Listeners are the sockets of one sandbox (opened in its namespace).
type Listeners struct {
	TCP    *net.TCPListener
	DNSUDP *net.UDPConn
	DNSTCP *net.TCPListener
}

// box is one sandbox as the proxy sees it.
type box struct {
	id        string
	pol       atomic.Pointer[compiled]
	ls        Listeners
	dns       []*dns.Server
	transport *http.Transport

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	open  int // admitted connections (admit)
	done  bool

	warned atomic.Bool // a refusal was logged within warnEvery
}

// New returns a Proxy.
func New(opts Options) (*Proxy, error) {
	if opts.CA == nil {
		return nil, errors.New("egress: CA is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Recorder == nil {
		opts.Recorder = RecorderFunc(func(Event) {})
	}
	res, err := newResolver(opts.Hosts)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if len(opts.UpstreamRootsPEM) > 0 && !roots.AppendCertsFromPEM(opts.UpstreamRootsPEM) {
		return nil, errors.New("egress: UpstreamRootsPEM holds no certificate")
	}
	p := &Proxy{opts: opts, log: opts.Logger, res: res, boxes: map[string]*box{}, maxConns: opts.MaxConnsPerSandbox}
	if p.maxConns <= 0 {
		p.maxConns = DefaultMaxConns
	}
	p.tlsConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return p, nil
}

// newTransport is one sandbox's upstream HTTP client: pooled connections are
// never shared between sandboxes (each was dialed under one policy).
func (p *Proxy) newTransport() *http.Transport {
	return &http.Transport{
		DialContext:           p.dialUpstream,
		TLSClientConfig:       p.tlsConfig.Clone(),
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       60 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
}

// CA is the proxy's interception CA.
func (p *Proxy) CA() *CA { return p.opts.CA }

// Attach starts serving sandbox id on ls with policy pol.
func (p *Proxy) Attach(id string, pol Policy, ls Listeners) error {
	c, err := compile(pol)
	if err != nil {
		return err
	}
	b := &box{id: id, ls: ls, conns: map[net.Conn]struct{}{}, transport: p.newTransport()}
	b.pol.Store(c)
	p.mu.Lock()
	if _, dup := p.boxes[id]; dup {
		p.mu.Unlock()
		return fmt.Errorf("egress: sandbox %s already attached", id)
	}
	p.boxes[id] = b
	p.mu.Unlock()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, m *dns.Msg) { p.serveDNS(b, w, m) })
	b.dns = []*dns.Server{{PacketConn: ls.DNSUDP, Handler: h}, {Listener: dnsListener{TCPListener: ls.DNSTCP, p: p, b: b}, Handler: h}}
	for _, s := range b.dns {
		go func() {
			if err := s.ActivateAndServe(); err != nil && !errors.Is(err, net.ErrClosed) {
				p.log.Warn("dns server stopped", "sandbox_id", id, "err", err)
			}
		}()
	}
	go p.acceptLoop(b)
	return nil
}

// SetPolicy replaces sandbox id's policy; new connections, requests and
// queries see it at once.
func (p *Proxy) SetPolicy(id string, pol Policy) error {
	c, err := compile(pol)
	if err != nil {
		return err
	}
	p.mu.Lock()
	b := p.boxes[id]
	p.mu.Unlock()
	if b == nil {
		return fmt.Errorf("%w: %s", ErrUnknownSandbox, id)
	}
	b.pol.Store(c)
	return nil
}

// Detach stops serving sandbox id: its listeners and open connections are
// closed.
func (p *Proxy) Detach(id string) {
	p.mu.Lock()
	b := p.boxes[id]
	delete(p.boxes, id)
	p.mu.Unlock()
	if b == nil {
		return
	}
	for _, s := range b.dns {
		_ = s.Shutdown()
	}
	_ = b.ls.TCP.Close()
	_ = b.ls.DNSUDP.Close()
	_ = b.ls.DNSTCP.Close()
	b.mu.Lock()
	b.done = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.transport.CloseIdleConnections()
}

// track registers an open connection so Detach can close it; it reports
// false if the sandbox is already gone.
func (b *box) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *box) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
}

func (p *Proxy) record(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	p.opts.Recorder.RecordNetworkEvent(ev)
}
