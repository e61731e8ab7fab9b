package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/fleet/store"
)

type callerKey struct{}

// caller is the key of the request in ctx.
func caller(ctx context.Context) store.APIKey {
	k, _ := ctx.Value(callerKey{}).(store.APIKey)
	return k
}

func isAdmin(ctx context.Context) bool { return caller(ctx).Role == store.RoleAdmin }

// serveHTTP routes one request.
func (g *Gateway) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusWriter{ResponseWriter: w}
	route := g.serve(rec, r)
	g.met.request(route, rec.status(), time.Since(start))
}

// serve answers r and returns the route's name for the metrics.
func (g *Gateway) serve(w *statusWriter, r *http.Request) string {
	if id, ok := g.serviceHost(r.Host); ok {
		g.serviceURL(w, r, id)
		return "service_url"
	}
	p := r.URL.Path
	switch p {
	case "/healthz":
		writeJSON(w, http.StatusOK, g.health(r.Context()))
		return "healthz"
	case "/readyz":
		g.readyz(w, r)
		return "readyz"
	case "/metrics":
		g.met.handler().ServeHTTP(w, r)
		return "metrics"
	}
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if len(parts) >= 5 && parts[0] == "v1" && parts[1] == "sandboxes" && parts[3] == "ports" && r.Header.Get("Authorization") == "" {
		// A service URL by path with its own credential (an access token,
		// a share link) or none (a public port): its host checks it.
		g.serviceURL(w, r, parts[2])
		return "service_url"
	}
	key, hash, err := g.keys.principal(r)
	if err != nil {
		g.writeError(w, err)
		return "unauthorized"
	}
	ctx, done := g.keys.track(r.Context(), hash)
	defer done()
	r = r.WithContext(context.WithValue(ctx, callerKey{}, key))
	return g.api(w, r, parts)
}

// api answers an authenticated API request.
func (g *Gateway) api(w http.ResponseWriter, r *http.Request, parts []string) string {
	if len(parts) == 1 && parts[0] == "openapi.yaml" {
		g.anyHost(w, r)
		return "openapi"
	}
	if len(parts) < 2 || parts[0] != "v1" {
		g.writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no such endpoint: %s", r.URL.Path))
		return "not_found"
	}
	rest := parts[2:]
	switch parts[1] {
	case "sandboxes":
		return g.sandboxes(w, r, rest)
	case "snapshots":
		return g.snapshots(w, r, rest)
	case "templates":
		return g.templates(w, r, rest)
	case "secrets":
		return g.secrets(w, r, rest)
	case "projects":
		return g.projects(w, r, rest)
	case "keys":
		return g.keysAPI(w, r, rest)
	case "hosts":
		return g.hostsAPI(w, r, rest)
	}
	g.writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no such endpoint: %s", r.URL.Path))
	return "not_found"
}

// sandboxes routes /v1/sandboxes[/{id}[/…]].
func (g *Gateway) sandboxes(w http.ResponseWriter, r *http.Request, rest []string) string {
	switch {
	case len(rest) == 0 && r.Method == http.MethodPost:
		g.create(w, r)
		return "create"
	case len(rest) == 0 && r.Method == http.MethodGet:
		g.listSandboxes(w, r)
		return "list"
	case len(rest) == 0:
		g.writeError(w, errorf(http.StatusMethodNotAllowed, CodeInvalid, "method %s not allowed", r.Method))
		return "not_allowed"
	case len(rest) == 2 && rest[1] == "fork" && r.Method == http.MethodPost:
		g.fork(w, r, rest[0])
		return "fork"
	}
	sb, err := g.reachSandbox(r.Context(), rest[0])
	gone := err == nil && sb.Portable() && sb.HostState != store.HostLive
	if (errorCode(err) == CodeSandboxLost || gone) && len(rest) == 1 && r.Method == http.MethodDelete {
		// A lost sandbox's host is gone, or fenced it: its record is all
		// there is to delete. (A durable one's snapshot stays in the
		// store: GC collects its chunks once its refs go.)
		dctx, cancel := g.dbctx(r.Context())
		defer cancel()
		if err := g.st.Delete(dctx, sb.ID); err != nil {
			g.writeError(w, err)
			return "sandbox"
		}
		w.WriteHeader(http.StatusNoContent)
		return "sandbox"
	}
	if err != nil {
		g.writeError(w, err)
		return "sandbox"
	}
	if len(rest) == 2 && rest[1] == "migrate" && r.Method == http.MethodPost {
		g.migrate(w, r, sb)
		return "sandbox_migrate"
	}
	if g.cfg.Portable && sb.Portable() && len(rest) == 1 && r.Method == http.MethodGet && !g.holdsNow(r.Context(), sb) {
		// Looking at it does not resume it: its record says what it is.
		writeJSON(w, http.StatusOK, portableSandbox(sb))
		return "sandbox"
	}
	if g.cfg.Portable && sb.Portable() && r.Method != http.MethodDelete {
		moved, a, err := g.rehome(r.Context(), sb)
		if err != nil {
			g.writeHostError(w, err)
			return "sandbox"
		}
		if a != nil && len(rest) == 2 && rest[1] == "resume" {
			relay(w, a.resp, a.body)
			return "sandbox_resume"
		}
		sb = moved
	}
	g.proxySandbox(w, r, sb, rest[1:])
	if len(rest) >= 2 && knownOps[rest[1]] {
		return "sandbox_" + rest[1]
	}
	return "sandbox"
}

// reachSandbox returns the record of sandbox id if the caller may reach
// it: a sandbox of another project is answered as one that does not exist,
// and a lost one with why it was lost.
func (g *Gateway) reachSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	dctx, cancel := g.dbctx(ctx)
	defer cancel()
	sb, err := g.st.Get(dctx, id)
	switch {
	case err == nil && !isAdmin(ctx) && sb.Project != caller(ctx).Project, err == nil && sb.State == store.StatePlacing:
		return store.Sandbox{}, errorf(http.StatusNotFound, CodeSandboxNotFound, "sandbox not found: %s", id)
	case isNotFound(err):
		return store.Sandbox{}, errorf(http.StatusNotFound, CodeSandboxNotFound, "sandbox not found: %s", id)
	case err != nil:
		return store.Sandbox{}, err
	case sb.State == store.StateLost:
		return sb, errorf(http.StatusGone, CodeSandboxLost, "sandbox %s was lost: %s", id, sb.Reason)
	case sb.MovingUntil.After(time.Now()):
		return sb, &apiError{status: http.StatusServiceUnavailable, code: CodeSandboxMoving, retryAfter: true,
			msg: "sandbox " + id + " is moving from host " + sb.Host + " to another; retry (re-attach exec streams by offset)"}
	case sb.HostState != store.HostLive && g.cfg.Portable && sb.Portable():
		return sb, nil // it resumes on another host (rehome)
	case sb.HostState != store.HostLive:
		return sb, &apiError{status: http.StatusServiceUnavailable, code: CodeHostUnavailable, retryAfter: true,
			msg: "sandbox " + id + "'s host " + sb.Host + " is " + sb.HostState + "; retry"}
	}
	return sb, nil
}

func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := g.dbctx(r.Context())
	defer cancel()
	if err := g.st.Ping(ctx); err != nil {
		g.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// serviceHost parses a host-based service URL's host, {port}-{id}.{domain}.
func (g *Gateway) serviceHost(host string) (string, bool) {
	if g.cfg.Domain == "" {
		return "", false
	}
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(strings.Trim(g.cfg.Domain, ".")))
	if !ok || strings.Contains(label, ".") {
		return "", false
	}
	port, id, ok := strings.Cut(label, "-")
	if _, err := strconv.Atoi(port); !ok || err != nil || id == "" {
		return "", false
	}
	return id, true
}

// serviceURL forwards a service-URL request to the host of sandbox id.
// With an API key the caller is checked here, and the host sees the host's
// token; with the URL's own credential the host checks that.
func (g *Gateway) serviceURL(w http.ResponseWriter, r *http.Request, id string) {
	if r.Header.Get("Authorization") != "" {
		key, hash, err := g.keys.principal(r)
		if err != nil {
			g.writeError(w, err)
			return
		}
		ctx, done := g.keys.track(r.Context(), hash)
		defer done()
		r = r.WithContext(context.WithValue(ctx, callerKey{}, key))
	} else {
		// Reached as an admin for the lookup only: the host judges the
		// URL's credential.
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, store.APIKey{Role: store.RoleAdmin}))
	}
	sb, err := g.reachSandbox(r.Context(), id)
	if err != nil {
		g.writeError(w, err)
		return
	}
	if g.cfg.Portable && sb.Portable() {
		// Auto-resume by a service URL: on a host that holds it.
		if sb, _, err = g.rehome(r.Context(), sb); err != nil {
			g.writeHostError(w, err)
			return
		}
	}
	g.fwd.forward(w, r, target{host: sb.Host, addr: sb.HostAddr, keepAuth: r.Header.Get("Authorization") == "", sandbox: sb})
}

// statusWriter records the status of a response; it passes Flush and
// Hijack on (streams and WebSockets).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// knownOps are the per-sandbox routes that get a metrics label of their own.
var knownOps = map[string]bool{"exec": true, "files": true, "ports": true, "snapshots": true, "pause": true, "resume": true,
	"timeout": true, "usage": true, "network": true, "events": true, "migrate": true}
