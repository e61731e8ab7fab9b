// Package fleetagent is hostd's part in a fleet (DESIGN R17): it
// registers the host's row in the fleet's database, holds its lease with
// heartbeats that report its capacity, and keeps the host to what the
// fleet says it owns. Fencing: at every registration (at start, and after
// the leader ended its epoch) it stops and deletes every local sandbox
// that the new epoch does not own, so a host that comes back runs nothing
// the fleet gave up on, and its writes carry its epoch, so an old life
// writes nothing over a newer record. While the database is unreachable
// the host's sandboxes run on untouched; the agent retries with backoff
// and resyncs when it returns.
package fleetagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/fleet/store"
)

// Defaults of Config.
const (
	DefaultTTL            = 10 * time.Second
	DefaultGrace          = time.Minute
	DefaultReconcileEvery = 3
)

// Sandbox is what the agent sees of a local sandbox.
type Sandbox struct {
	ID string
	// State is the sandbox manager's state ("running", "paused", ...).
	State   string
	Created time.Time
}

// Sandboxes is what the agent needs of the host's sandbox manager.
type Sandboxes interface {
	// List returns every local sandbox.
	List(ctx context.Context) ([]Sandbox, error)
	// Delete stops a sandbox and releases everything it holds.
	Delete(ctx context.Context, id string) error
	// Capacity is what the host admits in all and holds now (the agent
	// sets MaxSandboxes).
	Capacity(ctx context.Context) (store.Capacity, error)
}

// Store is what the agent needs of the fleet's store (*store.Store).
type Store interface {
	Register(ctx context.Context, r store.Registration) (epoch int64, owned []string, err error)
	Heartbeat(ctx context.Context, name string, epoch int64, ttl time.Duration, c store.Capacity) error
	Owned(ctx context.Context, host string, epoch int64) ([]string, error)
	Forget(ctx context.Context, host string, epoch int64, ids []string, before time.Time) (int, error)
	SetStates(ctx context.Context, host string, epoch int64, states map[string]string) (int, error)
}

// Config configures an Agent.
type Config struct {
	// Name is the host's name in the fleet; Addr the URL the control
	// plane reaches its API at; TokenHash hosttoken.Hash of its token.
	Name, Addr, TokenHash string
	// TTL is the lease (DefaultTTL); the agent heartbeats every TTL/3.
	TTL time.Duration
	// MaxSandboxes is the host's cap on sandboxes (0: none), reported.
	MaxSandboxes int
	// Grace spares rows younger than it from Forget (DefaultGrace): a
	// create may be in flight.
	Grace time.Duration
	// ReconcileEvery is how many heartbeats pass between reconciliations
	// (DefaultReconcileEvery).
	ReconcileEvery int
	Logger         *slog.Logger
}

// Agent holds a host's place in the fleet.
type Agent struct {
	cfg Config
	st  Store
	sb  Sandboxes
	log *slog.Logger

	mu         sync.Mutex
	epoch      int64
	registered chan struct{}
	regOnce    sync.Once
	wg         sync.WaitGroup
}

// New returns an agent; Run starts it.
func New(cfg Config, st Store, sb Sandboxes) *Agent {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.ReconcileEvery <= 0 {
		cfg.ReconcileEvery = DefaultReconcileEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Agent{cfg: cfg, st: st, sb: sb, log: cfg.Logger.With("host", cfg.Name), registered: make(chan struct{})}
}

// Epoch is the host's current epoch (0 before it first registered).
func (a *Agent) Epoch() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch
}

// Registered is closed once the host first registered and fenced.
func (a *Agent) Registered() <-chan struct{} { return a.registered }

// Run registers the host and holds its lease until ctx ends; it returns
// nil then. It does not stop the host's sandboxes when it returns.
func (a *Agent) Run(ctx context.Context) error {
	a.wg.Add(1)
	defer a.wg.Done()
	backoff := newBackoff(a.cfg.TTL)
	for ctx.Err() == nil {
		if err := a.register(ctx); err != nil {
			a.wait(ctx, backoff.next(), "register", err)
			continue
		}
		backoff.reset()
		a.hold(ctx, backoff)
	}
	return nil
}

// Wait waits for Run to return.
func (a *Agent) Wait() { a.wg.Wait() }

// wait sleeps d (or until ctx ends) after a failure of what.
func (a *Agent) wait(ctx context.Context, d time.Duration, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	a.log.Warn("fleet: "+what+" failed; retrying", "epoch", a.Epoch(), "retry_in", d, "err", err)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// register starts a new epoch and fences the host to what it owns in it.
func (a *Agent) register(ctx context.Context) error {
	c, err := a.capacity(ctx)
	if err != nil {
		return err
	}
	epoch, owned, err := a.st.Register(ctx, store.Registration{Name: a.cfg.Name, Addr: a.cfg.Addr, TokenHash: a.cfg.TokenHash, TTL: a.cfg.TTL, Capacity: c})
	if err != nil {
		return err
	}
	a.mu.Lock()
	prev := a.epoch
	a.epoch = epoch
	a.mu.Unlock()
	a.log.Info("fleet: registered", "epoch", epoch, "previous_epoch", prev, "owned", len(owned))
	if err := a.fence(ctx, epoch, owned); err != nil {
		return err
	}
	a.regOnce.Do(func() { close(a.registered) })
	return nil
}

// fence stops and deletes every local sandbox that epoch does not own.
func (a *Agent) fence(ctx context.Context, epoch int64, owned []string) error {
	local, err := a.sb.List(ctx)
	if err != nil {
		return fmt.Errorf("fleetagent: list sandboxes: %w", err)
	}
	var errs []error
	for _, s := range local {
		if slices.Contains(owned, s.ID) {
			continue
		}
		a.log.Warn("fleet: stopping a sandbox this host no longer owns", "epoch", epoch, "sandbox_id", s.ID, "state", s.State)
		if err := a.sb.Delete(ctx, s.ID); err != nil {
			errs = append(errs, fmt.Errorf("fleetagent: fence %s: %w", s.ID, err))
		}
	}
	return errors.Join(errs...)
}

// hold heartbeats until ctx ends or the host must register again (its
// epoch was ended). While the database is unreachable it retries with
// backoff; the lease, if still valid when it returns, goes on.
func (a *Agent) hold(ctx context.Context, backoff *backoff) {
	every := a.cfg.TTL / 3
	beats, wait := 0, every
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = every
		epoch := a.Epoch()
		err := a.heartbeat(ctx, epoch)
		if err == nil && beats%a.cfg.ReconcileEvery == 0 {
			err = a.reconcile(ctx, epoch)
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrFenced):
			a.log.Warn("fleet: this host's epoch was ended; registering again", "epoch", epoch, "err", err)
			return
		case err != nil:
			wait = backoff.next()
			a.log.Warn("fleet: heartbeat failed; retrying", "epoch", epoch, "retry_in", wait, "err", err)
			continue
		}
		if backoff.failures > 0 {
			a.log.Info("fleet: database back; lease held", "epoch", epoch)
		}
		backoff.reset()
		beats++
	}
}

func (a *Agent) heartbeat(ctx context.Context, epoch int64) error {
	c, err := a.capacity(ctx)
	if err != nil {
		return err
	}
	return a.st.Heartbeat(ctx, a.cfg.Name, epoch, a.cfg.TTL, c)
}

func (a *Agent) capacity(ctx context.Context) (store.Capacity, error) {
	c, err := a.sb.Capacity(ctx)
	if err != nil {
		return store.Capacity{}, fmt.Errorf("fleetagent: capacity: %w", err)
	}
	c.MaxSandboxes = a.cfg.MaxSandboxes
	return c, nil
}

// reconcile drops the rows of sandboxes this host no longer has (a
// timeout deleted them) and records the pauses and resumes it sees. The
// owned rows are read before the local list, so a row committed after a
// create is never taken for one the host lost.
func (a *Agent) reconcile(ctx context.Context, epoch int64) error {
	owned, err := a.st.Owned(ctx, a.cfg.Name, epoch)
	if err != nil {
		return err
	}
	local, err := a.sb.List(ctx)
	if err != nil {
		return fmt.Errorf("fleetagent: list sandboxes: %w", err)
	}
	have := make(map[string]string, len(local))
	for _, s := range local {
		have[s.ID] = s.State
	}
	var gone []string
	states := map[string]string{}
	for _, id := range owned {
		st, ok := have[id]
		switch {
		case !ok:
			gone = append(gone, id)
		case st == store.StateRunning || st == store.StatePaused:
			states[id] = st
		}
	}
	if len(gone) > 0 {
		n, err := a.st.Forget(ctx, a.cfg.Name, epoch, gone, time.Now().Add(-a.cfg.Grace))
		if err != nil {
			return err
		}
		if n > 0 {
			a.log.Info("fleet: forgot sandboxes this host no longer has", "epoch", epoch, "forgotten", n, "sandbox_ids", gone)
		}
	}
	if len(states) > 0 {
		if _, err := a.st.SetStates(ctx, a.cfg.Name, epoch, states); err != nil {
			return err
		}
	}
	return nil
}

// backoff doubles a retry's wait from TTL/20 up to TTL/4: a host whose
// database comes back heartbeats well within the lease the leader gives
// every host when it takes the lead again.
type backoff struct {
	base, limit time.Duration
	failures    int
}

func newBackoff(ttl time.Duration) *backoff {
	return &backoff{base: max(ttl/20, 5*time.Millisecond), limit: max(ttl/4, 10*time.Millisecond)}
}

func (b *backoff) next() time.Duration {
	d := b.base << min(b.failures, 10)
	b.failures++
	return min(d, b.limit)
}

func (b *backoff) reset() { b.failures = 0 }
