package hostd

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/fleet/hosttoken"
	fleetstore "github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/fleetagent"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
)

// FleetConfig makes hostd one host of a fleet (DESIGN R17): it registers in
// the fleet's PostgreSQL database and holds its lease there
// (hostd/fleetagent), and its API accepts only its host token, as an admin
// of the default project (callers reach it through the control plane).
type FleetConfig struct {
	// DB is the fleet database's DSN; empty is single-host mode.
	DB string
	// Host is the host's name in the fleet (default: the hostname).
	Host string
	// Advertise is the URL the control plane reaches this hostd at
	// (default: http(s)://<the bound listen address>).
	Advertise string
	// Secret is the fleet secret that host tokens derive from.
	Secret []byte
	// LeaseTTL is the host's lease (default fleetagent.DefaultTTL).
	LeaseTTL time.Duration
	// MaxSandboxes caps the sandboxes this host holds (0: none).
	MaxSandboxes int
}

// On reports whether hostd runs as a fleet host.
func (f FleetConfig) On() bool { return f.DB != "" }

// withDefaults fills in the host name and lease, and checks the secret.
func (f FleetConfig) withDefaults() (FleetConfig, error) {
	if !f.On() {
		return f, nil
	}
	if f.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return f, fmt.Errorf("hostd: fleet host name: %w", err)
		}
		f.Host = h
	}
	if f.LeaseTTL <= 0 {
		f.LeaseTTL = fleetagent.DefaultTTL
	}
	if len(f.Secret) < hosttoken.MinSecretLen {
		return f, fmt.Errorf("hostd: fleet mode: %w (AGENTBOX_FLEET_SECRET or --fleet-secret-file)", hosttoken.ErrWeakSecret)
	}
	return f, nil
}

// fleetAuth is the API's authenticator in fleet mode: the host token only.
func fleetAuth(f FleetConfig) *auth.Fixed {
	return auth.NewFixed(hosttoken.Token(f.Secret, f.Host),
		store.APIKey{ID: "fleet-host-token", Name: "fleet", Project: store.DefaultProject, Role: store.RoleAdmin})
}

// advertise is the URL the control plane reaches hostd at, listening on
// addr.
func advertise(cfg Config, addr string) string {
	if cfg.Fleet.Advertise != "" {
		return cfg.Fleet.Advertise
	}
	if cfg.TLSCert != "" && cfg.TLSKey != "" {
		return "https://" + addr
	}
	return "http://" + addr
}

// fleetMember runs the fleet agent once hostd listens: it opens the
// fleet's store (retrying while the database is unreachable: the host's
// sandboxes run on meanwhile) and holds the host's lease until stopped.
type fleetMember struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startFleet(ctx context.Context, cfg Config, mgr *sandbox.Manager, local *store.Store, addr string, log *slog.Logger, durable *fleetDurability) *fleetMember {
	ctx, cancel := context.WithCancel(ctx)
	m := &fleetMember{cancel: cancel}
	f := cfg.Fleet
	acfg := fleetagent.Config{Name: f.Host, Addr: advertise(cfg, addr), TokenHash: hosttoken.Hash(hosttoken.Token(f.Secret, f.Host)),
		TTL: f.LeaseTTL, MaxSandboxes: f.MaxSandboxes, Logger: log}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		st := openFleetStore(ctx, f, log)
		if st == nil {
			return
		}
		defer st.Close()
		durable.set(st)
		defer durable.set(nil)
		_ = fleetagent.New(acfg, st, fleetSandboxes{mgr, local}).Run(ctx)
	}()
	return m
}

// stop ends the agent and waits for it; the host's sandboxes are left as
// they are.
func (m *fleetMember) stop() {
	if m == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
}

// openFleetStore opens the fleet's store, retrying until ctx ends (nil).
func openFleetStore(ctx context.Context, f FleetConfig, log *slog.Logger) *fleetstore.Store {
	wait := f.LeaseTTL / 10
	for {
		st, err := fleetstore.Open(ctx, f.DB)
		if err == nil {
			return st
		}
		log.Warn("fleet: cannot open the fleet database; retrying", "host", f.Host, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, f.LeaseTTL/4)
	}
}

// fleetSandboxes is the sandbox manager as the fleet agent sees it.
type fleetSandboxes struct {
	mgr   *sandbox.Manager
	local *store.Store
}

func (s fleetSandboxes) List(ctx context.Context) ([]fleetagent.Sandbox, error) {
	list, err := s.mgr.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]fleetagent.Sandbox, 0, len(list))
	for _, sb := range list {
		out = append(out, fleetagent.Sandbox{ID: sb.ID, State: string(sb.State), Created: sb.CreatedAt})
	}
	return out, nil
}

func (s fleetSandboxes) Delete(ctx context.Context, id string) error { return s.mgr.Delete(ctx, id) }

// Capacity reports what the host admits (sandbox.Manager.Admissible), how
// many sandboxes run, its templates, and the warm ones: templates whose
// pool holds a sandbox, and "@base" while the base snapshot's pool does.
func (s fleetSandboxes) Capacity(ctx context.Context) (fleetstore.Capacity, error) {
	var c fleetstore.Capacity
	var err error
	if c.MemMiB, c.VCPUs, err = s.mgr.Admissible(); err != nil {
		return c, err
	}
	list, err := s.mgr.List(ctx)
	if err != nil {
		return c, err
	}
	for _, sb := range list {
		if sb.State == sandbox.StateRunning {
			c.Running++
		}
	}
	ts, err := s.local.ListTemplates(ctx)
	if err != nil {
		return c, err
	}
	for _, t := range ts {
		c.Templates = append(c.Templates, t.Name)
	}
	base := false
	for name, n := range s.mgr.PoolSizes() {
		switch {
		case n == 0:
		case strings.HasPrefix(name, "@base:"):
			base = true
		default:
			c.Warm = append(c.Warm, name)
		}
	}
	if base {
		c.Warm = append(c.Warm, "@base")
	}
	return c, nil
}

// principalAuth is what the API's authenticators are: stored keys
// (auth.Authenticator) or, in fleet mode, the host token (auth.Fixed).
type principalAuth interface {
	Authenticate(r *http.Request) error
	Principal(r *http.Request) (store.APIKey, error)
	Check(ctx context.Context, id string) error
}

// fleetDurability records durable pauses in the fleet's store once the
// fleet agent opened it (sandbox.Durability); before, and without a
// fleet, a report is dropped (the gateway records the API's pauses).
type fleetDurability struct {
	mu sync.Mutex
	st *fleetstore.Store
}

func (d *fleetDurability) set(st *fleetstore.Store) {
	d.mu.Lock()
	d.st = st
	d.mu.Unlock()
}

// SetDurable records sandboxID's durable manifest in the fleet store.
func (d *fleetDurability) SetDurable(ctx context.Context, sandboxID, manifest string, at time.Time) error {
	d.mu.Lock()
	st := d.st
	d.mu.Unlock()
	if st == nil {
		return nil
	}
	return st.SetDurable(ctx, sandboxID, manifest, at)
}
