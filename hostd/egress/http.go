package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// serveHTTP serves the HTTP/1.1 requests of one guest connection (plain, or
// decrypted when sni is set) and returns when the connection ends.
func (p *Proxy) serveHTTP(b *box, c net.Conn, scheme, sni string, port int) {
	srv := &http.Server{
		Handler:           p.handler(b, scheme, sni, port),
		ReadHeaderTimeout: peekTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	_ = srv.Serve(newOneConnListener(c))
}

type ctxKey struct{}

// reqState travels with an upstream request to dialUpstream.
type reqState struct {
	pol *compiled
}

// handler proxies one request after checking it against the policy.
func (p *Proxy) handler(b *box, scheme, sni string, port int) http.Handler {
	kind := KindHTTP
	if scheme == "https" {
		kind = KindHTTPS
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pol := b.pol.Load()
		host := hostOnly(r.Host)
		ev := Event{SandboxID: b.id, Kind: kind, Host: host, Port: port, Method: r.Method, Path: r.URL.Path}
		rule, reason := p.allowRequest(pol, scheme, sni, host)
		if rule == "" {
			ev.Rule, ev.Status = "denied: "+reason, http.StatusForbidden
			p.record(ev)
			deny(w, host, reason)
			return
		}
		ev.Allowed, ev.Rule = true, rule
		var injects []InjectRule
		if scheme == "https" {
			injects = pol.injections(host)
		}
		if err := p.inject(r, injects, pol); err != nil {
			ev.Rule, ev.Status = rule+" (inject: "+err.Error()+")", http.StatusBadGateway
			p.record(ev)
			http.Error(w, "agentbox egress proxy: "+err.Error(), http.StatusBadGateway)
			return
		}
		cw := &countingWriter{ResponseWriter: w}
		body := &countingBody{ReadCloser: r.Body}
		r.Body = body
		target := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = scheme, net.JoinHostPort(host, strconv.Itoa(port))
				pr.Out.Host = r.Host
				pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), ctxKey{}, reqState{pol: pol}))
			},
			Transport:     b.transport,
			FlushInterval: -1,
			ErrorLog:      log.New(io.Discard, "", 0),
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				http.Error(w, fmt.Sprintf("agentbox egress proxy: upstream %s: %v", target, err), http.StatusBadGateway)
			},
		}
		rp.ServeHTTP(cw, r)
		ev.Status, ev.BytesIn, ev.BytesOut = cw.status, cw.n.Load(), body.n.Load()
		p.record(ev)
	})
}

// allowRequest returns the rule that allows a request to host, or "" and
// why not.
func (p *Proxy) allowRequest(pol *compiled, scheme, sni, host string) (rule, reason string) {
	if sni != "" && !strings.EqualFold(host, sni) {
		return "", fmt.Sprintf("Host %q does not match the TLS server name %q", host, sni)
	}
	if scheme == "https" {
		if rs := pol.injections(host); len(rs) > 0 {
			return "inject:" + rs[0].Host, ""
		}
	}
	if r, ok := pol.domainRule(host); ok {
		return "domain:" + r, ""
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if r, ok := pol.cidrRule(a); ok && !neverDial(a) {
			return "cidr:" + r, ""
		}
	}
	return "", "host not in the sandbox's allowlist"
}

// deny answers a denied request with a 403 and the reason.
func deny(w http.ResponseWriter, host, reason string) {
	w.Header().Set("X-Agentbox-Egress", "denied")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "agentbox egress proxy: request to %s denied: %s\n", host, reason)
}

// inject applies the credential rules to r: headers set from their values
// (with {{secret:NAME}} expanded), and placeholder tokens of the secrets
// those rules reference replaced by the secrets in every header value and
// in the query. Nothing is done without a rule.
func (p *Proxy) inject(r *http.Request, rules []InjectRule, pol *compiled) error {
	if len(rules) == 0 {
		return nil
	}
	if p.opts.Secrets == nil {
		return errors.New("no secret store")
	}
	values := map[string]string{}
	secret := func(name string) (string, error) {
		if v, ok := values[name]; ok {
			return v, nil
		}
		b, err := p.opts.Secrets.SecretValue(r.Context(), name)
		if err != nil {
			return "", fmt.Errorf("secret %q: %w", name, err)
		}
		values[name] = string(b)
		return values[name], nil
	}
	for _, rule := range rules {
		if rule.Kind == KindAWS {
			// Before the placeholder swap, which must not touch the
			// guest's Authorization; the secret goes into no header.
			name := rule.Secrets()[0]
			b, err := p.opts.Secrets.SecretValue(r.Context(), name)
			if err != nil {
				return fmt.Errorf("secret %q: %w", name, err)
			}
			if err := resignAWS(r.Context(), r, name, string(b), pol.Placeholders); err != nil {
				return err
			}
			continue
		}
	}
	for _, rule := range rules {
		if rule.Kind == KindAWS {
			continue
		}
		v := rule.Value
		for _, name := range rule.Secrets() {
			s, err := secret(name)
			if err != nil {
				return err
			}
			v = strings.ReplaceAll(v, "{{secret:"+name+"}}", s)
		}
		r.Header.Set(rule.Header, v)
	}
	for token, name := range pol.Placeholders {
		if _, referenced := values[name]; !referenced {
			continue // only secrets that a rule for this host uses
		}
		for k, vs := range r.Header {
			for i, v := range vs {
				r.Header[k][i] = strings.ReplaceAll(v, token, values[name])
			}
		}
		r.URL.RawQuery = strings.ReplaceAll(r.URL.RawQuery, token, values[name])
	}
	return nil
}

// dialUpstream is the transport's dialer: names go through the resolver
// with the request's policy.
func (p *Proxy) dialUpstream(ctx context.Context, _, addr string) (net.Conn, error) {
	st, _ := ctx.Value(ctxKey{}).(reqState)
	if st.pol == nil {
		return nil, errors.New("egress: upstream dial without a policy")
	}
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portS)
	return p.res.dial(ctx, host, port, st.pol)
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return strings.ToLower(strings.Trim(h, "[]"))
	}
	return strings.ToLower(strings.Trim(hostport, "[]"))
}

type countingWriter struct {
	http.ResponseWriter
	status int
	n      atomic.Int64
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (Hijack for
// protocol upgrades such as WebSocket).
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

type countingBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// oneConnListener hands out one connection, then blocks until it is closed.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
	taken  atomic.Bool
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{})}
	l.conn = &notifyConn{Conn: c, l: l}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.taken.CompareAndSwap(false, true) {
		return l.conn, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

type notifyConn struct {
	net.Conn
	l *oneConnListener
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	_ = c.l.Close()
	return err
}
