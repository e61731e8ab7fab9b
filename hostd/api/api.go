package api

import (
	"context"
	_ "embed"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/hostd/internal/httpstatus"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

//go:embed openapi.yaml
var openapiYAML []byte

// Manager is what the handlers need of hostd's sandbox manager.
type Manager interface {
	Create(ctx context.Context, opts sandbox.CreateOptions) (sandbox.Info, error)
	Get(ctx context.Context, id string) (sandbox.Info, error)
	List(ctx context.Context) ([]sandbox.Info, error)
	Delete(ctx context.Context, id string) error
	// Exec runs req and calls emit for each event in order: start, output..., exit.
	// It returns nil after the exit event was emitted, or the error that ended it.
	Exec(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error
	Signal(ctx context.Context, id, execID string, sig syscall.Signal) error
	// ReadFile opens path; the error reflects the open (not found, is a directory...).
	ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error)
	WriteFile(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) error
	ListDir(ctx context.Context, id, path string) ([]sandbox.FileInfo, error)
	// ListDirPage lists up to limit entries of a directory, those whose
	// names sort after after ("" for the first page).
	ListDirPage(ctx context.Context, id, path, after string, limit int) (sandbox.DirPage, error)
	Stat(ctx context.Context, id, path string) (sandbox.FileInfo, error)
	Mkdir(ctx context.Context, id, path string) error
	Remove(ctx context.Context, id, path string, recursive bool) error
	Rename(ctx context.Context, id, from, to string) error
	ArchiveManager
	SnapshotManager
	LimitManager
	SessionManager
}

// Authenticator decides whether a request may use the /v1 API. It returns
// nil to let the request through, an error wrapping auth.ErrUnauthorized to
// answer 401, or any other error (the key store failed) to answer 500.
// *auth.Authenticator implements it.
type Authenticator interface {
	Authenticate(r *http.Request) error
}

// HealthInfo is what GET /healthz reports about the VMM backend.
type HealthInfo struct {
	// VMM is the backend's name ("qemu", "cloud-hypervisor").
	VMM string
	// Accel is the accelerator in use ("kvm", "tcg").
	Accel string
}

// Options configure New.
type Options struct {
	// Manager runs the sandboxes. Required.
	Manager Manager
	// Auth guards every route except the public ones (GET /healthz,
	// GET /openapi.yaml). A nil Auth rejects every guarded request.
	Auth Authenticator
	// Health reports the VMM backend for GET /healthz; nil reports "".
	Health func() HealthInfo
	// Network serves the network policy and events routes, Secrets the
	// secrets routes (network.go); nil answers them with 501.
	Network NetworkManager
	Secrets SecretStore
	// Logger receives one line per request and every internal error;
	// nil discards.
	Logger *slog.Logger
	// Metrics serves GET /metrics (behind the API key); nil answers 404.
	Metrics http.Handler
	// Ports issues service-URL access (*portproxy.Proxy); nil answers the
	// ports routes with 501.
	Ports Ports
	// Events is the flight recorder: it serves the events route and
	// records the api events; nil answers the route with 501.
	Events EventLog
	// Tracer starts a span for every request, continuing the caller's
	// traceparent; nil starts none (events then carry the caller's ids).
	Tracer trace.Tracer
	// Images builds templates from OCI images; nil answers such builds
	// with 501.
	Images ImageTemplates
	// Builds builds templates from a Dockerfile or blueprint in an
	// uploaded context, unpacked under BuildDir ("" = the system's
	// temporary directory); nil answers such builds with 501.
	Builds   TemplateBuilds
	BuildDir string
	// Tenancy keeps projects, keys and owners (tenancy.go); nil is one
	// project whose every key is an admin, and answers the key and
	// project routes with 501.
	Tenancy Tenancy
	// Quotas bound each named project (quota.go); DefaultVCPUs and
	// DefaultMemoryMiB size, for them, a create that asks for 0.
	Quotas                         map[string]Quota
	DefaultVCPUs, DefaultMemoryMiB int
	// RotateKey makes a new bootstrap key (auth.Rotate); nil answers
	// POST /v1/keys/rotate with 501.
	RotateKey func(ctx context.Context) (string, error)
}

// publicRoutes are the ServeMux patterns that need no API key. Every other
// route, including unknown ones, is authenticated first: a route added to the
// document is guarded unless it is added here too. TestPublicRoutesMatchSpec
// checks this set against the document's `security: []` operations.
var publicRoutes = map[string]bool{
	"GET /healthz":      true,
	"GET /openapi.yaml": true,
}

// server implements the generated ServerInterface.
type server struct {
	m       Manager
	ports   Ports
	net     NetworkManager
	secrets SecretStore
	health  func() HealthInfo
	log     *slog.Logger
	metrics http.Handler
	events  EventLog
	tracer  trace.Tracer
	images  ImageTemplates
	builds  TemplateBuilds
	// buildDir holds the build contexts being built.
	buildDir string
	// collect bounds the output held by all collected execs (collect.go).
	collect *outputBudget
	tenancy Tenancy
	keys    Principals
	quotas  quotas
	rotate  func(ctx context.Context) (string, error)
}

var _ ServerInterface = (*server)(nil)

// New returns hostd's API handler.
func New(opts Options) http.Handler {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{m: opts.Manager, ports: opts.Ports, net: opts.Network, secrets: opts.Secrets, health: opts.Health, log: log, metrics: opts.Metrics,
		events: opts.Events, tracer: opts.Tracer, images: opts.Images, builds: opts.Builds, buildDir: opts.BuildDir, collect: newOutputBudget(maxCollectedTotal),
		tenancy: opts.Tenancy, rotate: opts.RotateKey,
		quotas: quotas{byProject: opts.Quotas, defaultVCPUs: opts.DefaultVCPUs, defaultMemoryMiB: opts.DefaultMemoryMiB}}
	s.keys, _ = opts.Auth.(Principals)
	doc, err := loadSpec()
	if err != nil {
		panic(err) // the embedded document; TestSpecLoads checks it
	}
	mux := http.NewServeMux()
	HandlerWithOptions(s, StdHTTPServerOptions{
		BaseRouter:       mux,
		ErrorHandlerFunc: s.paramError,
		// The last runs first: the tenancy guard (another project's id is
		// a 404), then the spec's validation.
		Middlewares: []MiddlewareFunc{newValidator(doc).middleware(s), s.guard},
	})
	return &router{mux: mux, auth: opts.Auth, s: s}
}

// router authenticates, routes, answers unknown routes with JSON errors and
// logs every request.
type router struct {
	mux  *http.ServeMux
	auth Authenticator
	s    *server
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &httpstatus.Recorder{ResponseWriter: w}
	r = withKeyHolder(r)
	r, span := rt.s.startSpan(w, r)
	// Deferred, so that a response aborted with http.ErrAbortHandler is
	// logged (and recorded) too.
	defer func() {
		rt.logRequest(r, rec, start)
		rt.s.endRequest(r, rec, start, span)
	}()
	rt.serve(rec, r)
}

func (rt *router) logRequest(r *http.Request, rec *httpstatus.Recorder, start time.Time) {
	level := slog.LevelInfo
	if r.URL.Path == "/healthz" {
		level = slog.LevelDebug
	}
	// The mux records the matched pattern and path values on r itself.
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("route", r.Pattern),
		slog.Int("status", rec.Status()),
		slog.Duration("duration", time.Since(start)),
	}
	if id := r.PathValue("id"); id != "" {
		attrs = append(attrs, slog.String("sandbox_id", id))
	}
	if k := caller(r.Context()); k.ID != "" {
		attrs = append(attrs, slog.String("key_id", k.ID), slog.String("project", k.Project))
	}
	rt.s.log.LogAttrs(r.Context(), level, "api request", attrs...)
}

func (rt *router) serve(w http.ResponseWriter, r *http.Request) {
	h, pattern := rt.mux.Handler(r)
	r = withSubprotocolBearer(r, pattern)
	if !publicRoutes[pattern] {
		if err := rt.identify(r); err != nil {
			rt.s.writeError(w, r, err)
			return
		}
	}
	if pattern == "" {
		// No route: let the mux pick 404, 405 or a redirect, with a JSON body.
		h.ServeHTTP(&routeErrorWriter{ResponseWriter: w, s: rt.s, r: r}, r)
		return
	}
	rt.mux.ServeHTTP(w, r)
}

func (rt *router) authenticate(r *http.Request) error {
	if rt.auth == nil {
		return errUnauthorized
	}
	return rt.auth.Authenticate(r)
}

// routeErrorWriter turns the mux's plain-text 404 and 405 answers into the
// API's JSON errors, keeping its headers (Allow, Location).
type routeErrorWriter struct {
	http.ResponseWriter
	s       *server
	r       *http.Request
	written bool
}

func (e *routeErrorWriter) WriteHeader(code int) {
	if e.written {
		return
	}
	e.written = true
	switch code {
	case http.StatusNotFound:
		e.s.writeError(e.ResponseWriter, e.r, &apiError{status: code, code: CodeNotFound, msg: "no such route"})
	case http.StatusMethodNotAllowed:
		e.s.writeError(e.ResponseWriter, e.r, &apiError{status: code, code: CodeMethodNotAllowed, msg: "method not allowed on this route"})
	default:
		e.ResponseWriter.WriteHeader(code)
	}
}

// Write drops the mux's own text bodies; the JSON error replaces them.
func (e *routeErrorWriter) Write(p []byte) (int, error) {
	if !e.written {
		e.WriteHeader(http.StatusOK)
	}
	return len(p), nil
}
