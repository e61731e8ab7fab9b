package api

import (
	"net/http"
	"strings"
)

// A browser cannot set Authorization on a WebSocket, so the pty route also
// takes its key as a subprotocol: the client offers ptySubprotocol and
// bearerSubprotocol+key, and hostd answers with ptySubprotocol (openapi.yaml,
// execPTY).
const (
	ptySubprotocol    = "agentbox.pty"
	bearerSubprotocol = "agentbox.bearer."
	ptyPattern        = http.MethodGet + " /v1/sandboxes/{id}/exec/{exec_id}/pty"
)

// withSubprotocolBearer returns r with `Authorization: Bearer <key>` taken
// from an offered agentbox.bearer.<key> subprotocol, when r is a WebSocket
// upgrade to the pty route without an Authorization header of its own;
// otherwise r itself.
func withSubprotocolBearer(r *http.Request, pattern string) *http.Request {
	if pattern != ptyPattern || r.Header.Get("Authorization") != "" ||
		!strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return r
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if key, ok := strings.CutPrefix(strings.TrimSpace(p), bearerSubprotocol); ok && key != "" {
				r2 := r.Clone(r.Context())
				r2.Header.Set("Authorization", "Bearer "+key)
				return r2
			}
		}
	}
	return r
}
