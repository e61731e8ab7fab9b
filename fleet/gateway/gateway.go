// Package gateway is the fleet's control plane (DESIGN R17): a stateless
// HTTP server that speaks hostd's API, so the CLI, both SDKs and the MCP
// server work against a fleet unchanged. It authenticates callers with the
// projects and keys in PostgreSQL, places creates and forks on hosts in one
// transaction each, and proxies every per-sandbox call to the host that owns
// it, with that host's token (a caller's key never reaches a host). Any
// number of replicas run side by side; each keeps only caches, invalidated
// by NOTIFY.
//
// It reaches hosts over their HTTP API only, never by importing hostd.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/fleet/store"
)

// Config configures a gateway.
type Config struct {
	// Store is the fleet's database.
	Store *store.Store
	// Secret is the fleet secret that host tokens are derived from.
	Secret []byte
	// SecretsKey seals secrets at rest (32 bytes; nil refuses secrets).
	SecretsKey []byte
	// Domain enables host-based service URLs, {port}-{id}.{Domain}.
	Domain string
	// LeaseTTL is the hosts' lease (for Retry-After and the leader).
	LeaseTTL time.Duration
	// K is how many random candidates placement compares (best of K; 0: 3).
	K int
	// DefaultMemoryMiB and DefaultVCPUs size a create that does not say
	// (the hosts' own defaults; 0: 512 and 1).
	DefaultMemoryMiB, DefaultVCPUs int
	// CallTimeout bounds each database call of a request (0: 3 s), so an
	// outage fails calls fast.
	CallTimeout time.Duration
	Logger      *slog.Logger
	// AdminKeyFile receives the admin key that Bootstrap or a rotation
	// makes (mode 0600).
	AdminKeyFile string
	// Portable says the hosts share an object store for snapshots (their
	// --snapshot-store, issue 40): a pause is durable there, a paused
	// sandbox resumes on any host when its own is gone, sandboxes migrate
	// and drain, and snapshots and templates are no longer pinned to the
	// host that made them. Without it they are.
	Portable bool
	// Leader, if set, runs for the gateway's life (fleet/lease's leader).
	Leader interface {
		Run(ctx context.Context) error
	}
}

// Gateway serves the fleet's API.
type Gateway struct {
	cfg    Config
	st     *store.Store
	log    *slog.Logger
	keys   *keyCache
	fwd    *forwarder
	met    *metrics
	seal   *sealer
	synced syncedSecrets
	hh     hostsHealth
	wg     sync.WaitGroup
}

// New returns a gateway; Run serves it.
func New(cfg Config) (*Gateway, error) {
	if cfg.Store == nil {
		return nil, errors.New("gateway: no store")
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("gateway: no fleet secret")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.K <= 0 {
		cfg.K = 3
	}
	if cfg.DefaultMemoryMiB <= 0 {
		cfg.DefaultMemoryMiB = 512
	}
	if cfg.DefaultVCPUs <= 0 {
		cfg.DefaultVCPUs = 1
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	seal, err := newSealer(cfg.SecretsKey)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, st: cfg.Store, log: cfg.Logger, met: newMetrics(), seal: seal}
	g.keys = newKeyCache(cfg.Store, cfg.CallTimeout)
	g.fwd = newForwarder(g)
	return g, nil
}

// Handler is the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler { return http.HandlerFunc(g.serveHTTP) }

// Serve serves on l until ctx ends, with the key listener and the leader
// beside it; it waits for them before it returns.
func (g *Gateway) Serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.wg.Add(1)
	go func() { defer g.wg.Done(); g.keys.listen(ctx, g.log) }()
	if g.cfg.Leader != nil {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			if err := g.cfg.Leader.Run(ctx); err != nil && ctx.Err() == nil {
				g.log.Error("fleet leader stopped", "err", err)
			}
		}()
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	g.log.Info("gateway listening", "addr", l.Addr().String(), "domain", g.cfg.Domain)
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer scancel()
	serr := srv.Shutdown(sctx)
	if errors.Is(serr, context.DeadlineExceeded) {
		serr = srv.Close()
	}
	cancel()
	g.wg.Wait()
	g.fwd.close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, serr)
}

// dbctx bounds one database call of a request.
func (g *Gateway) dbctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.cfg.CallTimeout)
}

// retryAfter is the Retry-After of a 503 for the database or a host.
func (g *Gateway) retryAfter() string {
	return fmt.Sprint(max(int(g.cfg.LeaseTTL.Seconds()/5), 1))
}
