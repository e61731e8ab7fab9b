package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/store"
)

// target is the host a request goes to.
type target struct {
	host, addr string
	// keepAuth leaves the request's own credential (a service URL's
	// token); otherwise the host's token replaces the caller's key.
	keepAuth bool
	// after, if set, sees the host's response before the caller does (to
	// record what it changed); it may read and replace the body.
	after func(*http.Response) error
	// sandbox, when set, is the sandbox the call is about: a failure
	// while it moves between hosts is answered as retryable.
	sandbox store.Sandbox
}

type targetKey struct{}

// forwarder proxies requests to hosts: streams flush at once, WebSockets
// and PTYs are upgraded through, and the caller's key never goes on.
type forwarder struct {
	g  *Gateway
	tr *http.Transport
	rp *httputil.ReverseProxy
}

func newForwarder(g *Gateway) *forwarder {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	f := &forwarder{g: g, tr: tr}
	f.rp = &httputil.ReverseProxy{
		Rewrite:        f.rewrite,
		Transport:      tr,
		FlushInterval:  -1,
		ModifyResponse: f.modify,
		ErrorHandler:   f.failed,
	}
	return f
}

func (f *forwarder) close() { f.tr.CloseIdleConnections() }

func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, t target) {
	r = r.WithContext(context.WithValue(r.Context(), targetKey{}, t))
	f.rp.ServeHTTP(w, r)
}

func (f *forwarder) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	u, err := url.Parse(t.addr)
	if err != nil {
		u = &url.URL{Scheme: "http", Host: "invalid.invalid"}
	}
	pr.SetURL(u)
	pr.Out.Host = pr.In.Host // host-based service URLs keep their name
	pr.SetXForwarded()
	if !t.keepAuth {
		pr.Out.Header.Set("Authorization", "Bearer "+f.token(t.host))
	}
}

func (f *forwarder) token(host string) string { return hosttoken.Token(f.g.cfg.Secret, host) }

func (f *forwarder) modify(resp *http.Response) error {
	t := resp.Request.Context().Value(targetKey{}).(target)
	if resp.StatusCode >= 400 && f.g.moved(resp.Request.Context(), t.sandbox) {
		f.g.log.Info("a call failed on a sandbox that moved; answered retryable", "sandbox_id", t.sandbox.ID, "host", t.host,
			"status", resp.StatusCode)
		resp.Body.Close()
		b, _ := json.Marshal(apitypes.Error{Error: apitypes.ErrorBody{Code: CodeSandboxMoving,
			Message: "sandbox " + t.sandbox.ID + " moved to another host while this call ran on " + t.host + "; retry (re-attach exec streams by offset)"}})
		resp.StatusCode, resp.Status = http.StatusServiceUnavailable, "503 Service Unavailable"
		resp.Header = http.Header{"Content-Type": {"application/json"}, "Retry-After": {f.g.retryAfter()}}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		return nil
	}
	if t.after == nil {
		return nil
	}
	return t.after(resp)
}

// failed answers a host that could not be reached as 502, naming it.
func (f *forwarder) failed(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The caller left, or its key was revoked.
		f.g.writeError(w, errorf(http.StatusUnauthorized, CodeUnauthorized, "request ended: %v", context.Cause(r.Context())))
		return
	}
	if f.g.moved(r.Context(), t.sandbox) {
		f.g.writeError(w, &apiError{status: http.StatusServiceUnavailable, code: CodeSandboxMoving, retryAfter: true,
			msg: fmt.Sprintf("sandbox %s moved to another host while this call ran on %s (%v); retry (re-attach exec streams by offset)", t.sandbox.ID, t.host, err)})
		return
	}
	f.g.writeError(w, &apiError{status: http.StatusBadGateway, code: CodeHostUnavailable, retryAfter: true,
		msg: fmt.Sprintf("host %s did not answer: %v", t.host, err)})
}

// moved reports whether sb (a call's sandbox, when set) is being moved
// or has moved off the host the call went to.
func (g *Gateway) moved(ctx context.Context, sb store.Sandbox) bool {
	if !g.cfg.Portable || sb.ID == "" {
		return false
	}
	cur, err := g.fresh(ctx, sb.ID)
	return err == nil && (cur.Host != sb.Host || cur.HostEpoch != sb.HostEpoch || cur.MovingUntil.After(time.Now()))
}

// call makes one request to a host with its token and returns the
// response, its body read (at most limit bytes).
func (f *forwarder) call(ctx context.Context, host, addr, method, path string, body []byte, hdr http.Header, limit int64) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for _, h := range []string{"Content-Type", "Traceparent", "Tracestate", "Accept"} {
		if v := hdr.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+f.token(host))
	resp, err := (&http.Client{Transport: f.tr}).Do(req)
	if err != nil {
		return nil, nil, &apiError{status: http.StatusBadGateway, code: CodeHostUnavailable, retryAfter: true,
			msg: fmt.Sprintf("host %s did not answer: %v", host, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, nil, &apiError{status: http.StatusBadGateway, code: CodeHostUnavailable,
			msg: fmt.Sprintf("host %s: reading its answer: %v", host, err)}
	}
	return resp, b, nil
}

// relay writes a host's answer to the caller.
func relay(w http.ResponseWriter, resp *http.Response, body []byte) {
	for _, h := range []string{"Content-Type", "Retry-After", "Location"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// readBody reads a response's body (bounded) and puts it back.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Length")
	return b, nil
}
