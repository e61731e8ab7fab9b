// Package portproxy serves service URLs: authenticated HTTP and WebSocket
// access to a TCP port inside a sandbox (DESIGN R10). Each request reaches
// the guest through a port-forward stream over the agent channel, never
// through the guest's network interface.
//
// Two URL forms reach the same thing: host-based,
// {scheme}://{port}-{sandbox}.{domain}/…, when hostd has a domain (a wildcard
// DNS name pointing at the host is the operator's), and path-based,
// /v1/sandboxes/{id}/ports/{port}/…, which works without DNS. A URL opens
// with the API key, the sandbox's access token (header, or ?token= turned
// into a cookie), a signed share link with an expiry, or not at all when
// the port was made public.
package portproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/hostd/internal/fdbudget"
	"github.com/agentbox/agentbox/hostd/internal/httpstatus"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// Sandboxes is what the proxy needs of the sandbox manager.
type Sandboxes interface {
	Get(ctx context.Context, id string) (sandbox.Info, error)
	// DialPort connects to a TCP port on the sandbox's loopback.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
	// Resume restarts a paused sandbox; a request to one resumes it.
	Resume(ctx context.Context, id string) (sandbox.Info, error)
}

// Authenticator checks a request's API key (*auth.Authenticator).
type Authenticator interface {
	Authenticate(r *http.Request) error
}

var _ Sandboxes = sandbox.Service{}

// Options configure New.
type Options struct {
	Sandboxes Sandboxes
	// Auth accepts the API key on service URLs too; nil accepts none.
	Auth Authenticator
	// Domain enables host-based URLs, {port}-{sandbox}.{Domain}; "" leaves
	// only path-based ones.
	Domain string
	// DataDir holds portproxy.key (the HMAC key of tokens and share links,
	// mode 0600), public-ports.json and moved-credentials.json (those of
	// sandboxes imported from another host).
	DataDir string
	Logger  *slog.Logger
	// Now is the clock that share links are made and checked by; nil is
	// time.Now (a test moves it to expire a link).
	Now func() time.Time
	// MaxConnsPerSandbox caps each sandbox's concurrent service-URL
	// requests, each a port-forward stream (0: DefaultMaxConns); one past
	// it is answered 503.
	MaxConnsPerSandbox int
	// Budget, if set, is the host's file descriptors that the streams
	// take theirs from; a request past it is answered 503.
	Budget *fdbudget.Budget
}

// Proxy serves service URLs in front of another handler.
type Proxy struct {
	sbx    Sandboxes
	auth   Authenticator
	domain string
	sign   *signer
	public *publicPorts
	log    *slog.Logger
	rp     *httputil.ReverseProxy
	tr     *http.Transport
	res    resumer
	limit  *limiter
}

// New returns a Proxy, creating its key file if needed.
func New(opts Options) (*Proxy, error) {
	if opts.Sandboxes == nil || opts.DataDir == "" {
		return nil, errors.New("portproxy: Sandboxes and DataDir are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key, err := loadKey(filepath.Join(opts.DataDir, "portproxy.key"))
	if err != nil {
		return nil, err
	}
	pub, err := loadPublic(filepath.Join(opts.DataDir, "public-ports.json"))
	if err != nil {
		return nil, err
	}
	moved, err := loadMoved(filepath.Join(opts.DataDir, "moved-credentials.json"))
	if err != nil {
		return nil, err
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	p := &Proxy{sbx: opts.Sandboxes, auth: opts.Auth, domain: normDomain(opts.Domain),
		sign: &signer{key: key, now: now, moved: moved}, public: pub, log: log,
		res: resumer{pending: map[string]chan struct{}{}}, limit: newLimiter(opts.MaxConnsPerSandbox, opts.Budget, log)}
	p.tr = &http.Transport{
		DialContext:           p.dial,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       60 * time.Second,
		DisableCompression:    true, // pass the guest's encoding through untouched
		ExpectContinueTimeout: time.Second,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     p.tr,
		FlushInterval: -1, // stream: server-sent events, chunked output, WebSocket frames
		ErrorHandler:  p.proxyError,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return p, nil
}

// Close drops idle upstream connections.
func (p *Proxy) Close() { p.tr.CloseIdleConnections() }

// Wrap returns a handler that serves service URLs and passes every other
// request to next (the API).
func (p *Proxy) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := matchHost(r.Host, p.domain)
		if !ok {
			t, ok = matchPath(r.Method, r.URL.EscapedPath())
		}
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		p.serve(w, r, t)
	})
}

type targetKey struct{}

// serve answers one service-URL request.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, t target) {
	start := time.Now()
	rec := &httpstatus.Recorder{ResponseWriter: w}
	defer func() {
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "service url request",
			slog.String("sandbox_id", t.sandbox), slog.Int("port", t.port), slog.String("method", r.Method),
			slog.Int("status", rec.Status()), slog.Duration("duration", time.Since(start)))
	}()
	g, err := p.authorize(r, t)
	if err != nil {
		p.fail(rec, r, t, err)
		return
	}
	info, err := p.sbx.Get(r.Context(), t.sandbox)
	if err != nil {
		p.fail(rec, r, t, err)
		return
	}
	if err := p.ensureRunning(r.Context(), info); err != nil {
		p.fail(rec, r, t, err)
		return
	}
	release, err := p.limit.admit(t.sandbox)
	if err != nil {
		p.fail(rec, r, t, err)
		return
	}
	defer release()
	if g.cookie != nil {
		http.SetCookie(rec, g.cookie)
	}
	t.stripAuthorization = g.viaAuthorization
	p.rp.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

// rewrite points the outgoing request at the target and strips hostd's
// credentials, which must never reach the guest.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	out := pr.Out
	out.URL.Scheme, out.URL.Host = "http", t.addr()
	if t.pathBased {
		rest := out.URL.EscapedPath()[len(t.prefix):]
		out.URL.RawPath = rest
		if u, err := url.PathUnescape(rest); err == nil {
			out.URL.Path = u
		}
		if out.URL.Path == out.URL.RawPath {
			out.URL.RawPath = ""
		}
	}
	stripCredentials(out, t)
	pr.SetXForwarded()
	// The guest sees the Host the client used, as behind any reverse proxy.
	out.Host = pr.In.Host
}

// dial is the upstream transport's dialer: addr is a target's addr.
func (p *Proxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	id, port, ok := parseAddr(addr)
	if !ok {
		return nil, fmt.Errorf("portproxy: bad upstream address %q", addr)
	}
	return p.sbx.DialPort(ctx, id, port)
}

// URLs returns the host-based ("" without a domain) and path-based service
// URLs of sandbox id's port, as a client that reached hostd at origin
// (scheme and host) would open them.
func (p *Proxy) URLs(origin *url.URL, id string, port int) (host, path string) {
	return hostURL(origin, p.domain, id, port), pathURL(origin, id, port)
}

// Token is sandbox id's access token, which opens its every port.
func (p *Proxy) Token(id string) string { return p.sign.token(id) }

// Public reports whether sandbox id's port needs no credential.
func (p *Proxy) Public(id string, port int) bool { return p.public.is(id, port) }

// SetPublic makes sandbox id's port public (or private again).
func (p *Proxy) SetPublic(id string, port int, public bool) error {
	if !validPort(port) {
		return fmt.Errorf("%w: port %d", sandbox.ErrInvalid, port)
	}
	return p.public.set(id, port, public)
}

// Forget drops what the proxy keeps about a deleted sandbox (or one that
// moved away).
func (p *Proxy) Forget(id string) error {
	return errors.Join(p.public.forget(id), p.sign.moved.set(id, movedCred{}, true))
}

// ShareToken returns a share-link token for sandbox id's port that expires
// after ttl; append it to a service URL as ?token=.
func (p *Proxy) ShareToken(id string, port int, ttl time.Duration) (string, time.Time, error) {
	return p.ShareTokenBy(id, port, ttl, "")
}

// ShareTokenBy is ShareToken for a link minted by API key keyID: the link
// carries the key's id and dies with the key (see KeyChecker).
func (p *Proxy) ShareTokenBy(id string, port int, ttl time.Duration, keyID string) (string, time.Time, error) {
	if !validPort(port) || ttl <= 0 || strings.Contains(keyID, ".") {
		return "", time.Time{}, fmt.Errorf("%w: port %d, ttl %v", sandbox.ErrInvalid, port, ttl)
	}
	exp := p.sign.now().Add(ttl).Truncate(time.Second)
	return p.sign.share(id, port, exp, keyID), exp, nil
}

func normDomain(d string) string {
	for len(d) > 0 && (d[0] == '.' || d[0] == '*') {
		d = d[1:]
	}
	for len(d) > 0 && d[len(d)-1] == '.' {
		d = d[:len(d)-1]
	}
	return strings.ToLower(d)
}
