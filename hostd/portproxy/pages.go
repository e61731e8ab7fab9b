package portproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// failure is how an error is answered.
type failure struct {
	status int
	code   string
	title  string
	msg    string
}

// failureOf is the one place where the proxy's errors become statuses.
func failureOf(t target, err error) failure {
	switch {
	case errors.Is(err, ErrUnauthorized):
		return failure{http.StatusUnauthorized, "unauthorized", "Sign-in needed",
			"This service URL is private. Open it with the API key, the sandbox's access token (?token=…) or a share link."}
	case errors.Is(err, ErrExpired):
		return failure{http.StatusForbidden, "link_expired", "Link expired", "This share link has expired. Ask for a new one."}
	case errors.Is(err, sandbox.ErrNotFound):
		return failure{http.StatusNotFound, "sandbox_not_found", "No such sandbox", fmt.Sprintf("There is no sandbox %s.", t.sandbox)}
	case errors.Is(err, sandbox.ErrNotRunning):
		return failure{http.StatusConflict, "sandbox_not_running", "Sandbox not running",
			fmt.Sprintf("Sandbox %s is not running, so nothing can answer on port %d (%v).", t.sandbox, t.port, err)}
	case errors.Is(err, ErrOverCap):
		return failure{http.StatusServiceUnavailable, "over_capacity", "Too many connections",
			fmt.Sprintf("Sandbox %s's port %d cannot take another connection now (%v). Retry once some have closed.", t.sandbox, t.port, err)}
	case errors.Is(err, channel.ErrPortClosed):
		return failure{http.StatusBadGateway, "port_closed", "Nothing listening",
			fmt.Sprintf("Nothing in sandbox %s accepts connections on port %d. Start a server there "+
				"(for example: python3 -m http.server %d) and reload.", t.sandbox, t.port, t.port)}
	}
	return failure{http.StatusBadGateway, "bad_gateway", "Bad gateway",
		fmt.Sprintf("The service on port %d of sandbox %s did not answer properly.", t.port, t.sandbox)}
}

// fail answers r with err: an HTML page for browsers, the API's JSON error
// shape for other clients.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, t target, err error) {
	f := failureOf(t, err)
	level := slog.LevelDebug
	// A refusal past the cap is logged by the limiter, once a minute.
	if f.status >= 500 && !errors.Is(err, channel.ErrPortClosed) && !errors.Is(err, ErrOverCap) {
		level = slog.LevelWarn
	}
	p.log.LogAttrs(r.Context(), level, "service url failed", slog.String("sandbox_id", t.sandbox),
		slog.Int("port", t.port), slog.Int("status", f.status), slog.Any("err", err))
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if errors.Is(err, ErrOverCap) {
		h.Set("Retry-After", "1")
	}
	if f.status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="agentbox"`)
	}
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		h.Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, "<!doctype html><html><head><meta charset=\"utf-8\"><title>%d %s</title></head>"+
			"<body><h1>%s</h1><p>%s</p><p><small>agentbox · sandbox %s · port %d</small></p></body></html>\n",
			f.status, html.EscapeString(f.title), html.EscapeString(f.title), html.EscapeString(f.msg),
			html.EscapeString(t.sandbox), t.port)
		return
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": f.code, "message": f.msg}})
}

// proxyError is the reverse proxy's ErrorHandler.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		w.WriteHeader(http.StatusBadGateway) // the client went away; no one reads this
		return
	}
	p.fail(w, r, t, err)
}
