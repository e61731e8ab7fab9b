// Package console serves hostd's web console: the static bundle that
// console/ builds (make console), embedded so that `go build` needs no
// Node. The console is a client of the public HTTP API only; its files need
// no key (the page asks for one and keeps it in the browser's session).
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Prefix is where the console is served.
const Prefix = "/console/"

//go:embed all:dist
var dist embed.FS

// CSP is the Content-Security-Policy of every console response: scripts and
// styles only from the console's own files (no inline ones), connections
// only to hostd's own origin (its API and the pty WebSocket), no frames,
// no plugins, no forms elsewhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; object-src 'none'"

// Handler serves the console under Prefix (a request for /console is
// redirected to /console/).
func Handler() http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embedded directory exists: it is in this package
	}
	files := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// Mount returns a handler that serves the console under Prefix and passes
// every other request to api.
func Mount(api http.Handler) http.Handler {
	c := Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") || strings.HasPrefix(r.URL.Path, Prefix) {
			c.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}
