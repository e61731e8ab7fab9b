package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/snapshot"
)

// MaxPoolSize bounds a template's warm pool.
const MaxPoolSize = 16

// poolRegistry holds the templates' warm poolRegistry by template name.
type poolRegistry struct {
	mu     sync.Mutex
	byName map[string]*pool
}

// of returns template name's pool, making it if needed.
func (ps *poolRegistry) of(name string) *pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.byName == nil {
		ps.byName = map[string]*pool{}
	}
	p := ps.byName[name]
	if p == nil {
		p = &pool{}
		ps.byName[name] = p
	}
	return p
}

func (ps *poolRegistry) all() map[string]*pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make(map[string]*pool, len(ps.byName))
	for n, p := range ps.byName {
		out[n] = p
	}
	return out
}

// sizes reports how many warm sandboxes each pool holds.
func (ps *poolRegistry) sizes() map[string]int {
	out := map[string]int{}
	for n, p := range ps.all() {
		out[n] = p.size()
	}
	return out
}

// owned adds the ids of every warm sandbox to ids.
func (ps *poolRegistry) owned(ids map[string]bool) {
	for _, p := range ps.all() {
		p.mu.Lock()
		for _, e := range p.ready {
			ids[e.b.id] = true
		}
		if p.restoring != "" {
			ids[p.restoring] = true
		}
		p.mu.Unlock()
	}
}

// pool keeps a template's warm sandboxes: restored from its snapshot and
// paused, waiting to be claimed.
type pool struct {
	mu      sync.Mutex
	ready   []poolEntry
	filling bool
	// restoring is the sandbox a refill is restoring: it has a cgroup and
	// a directory but no record yet, and the reaper must not take it.
	restoring string
}

// setRestoring records the id a refill is restoring ("" when done).
func (p *pool) setRestoring(id string) {
	p.mu.Lock()
	p.restoring = id
	p.mu.Unlock()
}

type poolEntry struct {
	b   *runningVM
	rec store.Sandbox
}

func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// take removes the oldest warm sandbox.
func (p *pool) take() (poolEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return poolEntry{}, false
	}
	e := p.ready[0]
	p.ready = p.ready[1:]
	return e, true
}

// put adds a warm sandbox, first in line when front is set.
func (p *pool) put(e poolEntry, front bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if front {
		p.ready = append([]poolEntry{e}, p.ready...)
	} else {
		p.ready = append(p.ready, e)
	}
}

// drain removes every warm sandbox.
func (p *pool) drain() []poolEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.ready
	p.ready = nil
	return out
}

// fill marks the pool as being filled; it reports false if it already is.
func (p *pool) fill(on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && p.filling {
		return false
	}
	p.filling = on
	return true
}

// warmPools fills, drains and claims from the templates' and the base
// snapshot's warmPools pools. It makes and ends their VMs through vms (the
// manager).
type warmPools struct {
	pools   *poolRegistry
	store   poolStore
	nets    *netAttachments
	reg     *registry
	bases   *snapshot.BaseCatalog
	vms     poolVMs
	log     *slog.Logger
	spawn   func(func()) bool
	closing func() bool
	// dataDir holds the sandboxes' directories; bootTimeout bounds a pool
	// VM's agent connection; summary is whether guests report exit
	// summaries (the flight recorder is on).
	dataDir     string
	bootTimeout time.Duration
	summary     bool
}

// poolStore is the persistence the warm pools use.
type poolStore interface {
	PutSandbox(ctx context.Context, sb store.Sandbox) error
	DeleteSandbox(ctx context.Context, id string) error
	GetTemplate(ctx context.Context, name string) (store.Template, error)
	GetSnapshot(ctx context.Context, id string) (store.Snapshot, error)
	ListTemplates(ctx context.Context) ([]store.Template, error)
}

// poolVMs makes and ends the pools' VMs (the Manager).
type poolVMs interface {
	restore(ctx context.Context, rec store.Sandbox, from snapshot.From, wake bool, netReady func() error) (*runningVM, error)
	wake(ctx context.Context, b *runningVM, identity bool) error
	teardown(b *runningVM, why error)
}

// claim takes a warm sandbox of opts.Template, if one is ready, and wakes
// it as a new sandbox. The pool refills in the background.
func (w *warmPools) claim(ctx context.Context, name string, opts CreateOptions) (*runningVM, store.Sandbox, bool) {
	p := w.pools.of(name)
	defer w.refillLater(name)
	for {
		e, ok := p.take()
		if !ok {
			return nil, store.Sandbox{}, false
		}
		ph := newPhases(w.log, e.b.id, "claim")
		e.rec.Env, e.rec.Metadata, e.rec.TimeoutS, e.rec.CreatedAt = opts.Env, opts.Metadata, opts.TimeoutS, time.Now().UTC()
		e.b.env = opts.Env
		if err := w.store.PutSandbox(ctx, e.rec); err != nil {
			w.discard(e)
			return nil, store.Sandbox{}, false
		}
		ph.done("record")
		if err := w.nets.claim(ctx, e.b.id, opts.Network); err != nil {
			w.log.Warn("warm sandbox cannot take the policy; booting instead", "sandbox_id", e.b.id, "err", err)
			p.put(e, true)
			_ = w.store.DeleteSandbox(context.WithoutCancel(ctx), e.b.id)
			return nil, store.Sandbox{}, false
		}
		ph.done("policy")
		err := e.b.foreground()
		if err == nil {
			err = w.vms.wake(ctx, e.b, true)
		}
		if err != nil {
			w.log.Warn("warm sandbox did not wake; trying another", "sandbox_id", e.b.id, "err", err)
			w.discard(e)
			_ = w.store.DeleteSandbox(context.WithoutCancel(ctx), e.b.id)
			continue
		}
		w.log.Info("warm sandbox claimed", "sandbox_id", e.b.id, "pool", name)
		return e.b, e.rec, true
	}
}

func (w *warmPools) discard(e poolEntry) {
	w.vms.teardown(e.b, errors.New("sandbox: discarded from the warm pool"))
	w.reg.remove(e.b.id)
}

func (w *warmPools) refillLater(name string) {
	w.spawn(func() { w.refill(context.Background(), name) })
}

// refill restores sandboxes into a template's pool until it holds its size.
func (w *warmPools) refill(ctx context.Context, name string) {
	p := w.pools.of(name)
	if !p.fill(true) {
		return
	}
	defer p.fill(false)
	for !w.closing() {
		sn, size, err := w.source(ctx, name)
		if err != nil {
			return // deleted
		}
		if p.size() >= size {
			return
		}
		id := newSandboxID()
		rec := store.Sandbox{ID: id, State: string(StateCreating), VCPUs: sn.VCPUs, MemoryMiB: sn.MemoryMiB, Env: sn.Env,
			Dir: filepath.Join(w.dataDir, "sandboxes", id)}
		var b *runningVM
		p.setRestoring(id)
		err = w.nets.attach(ctx, id, w.nets.defaults())
		if err == nil {
			b, err = w.vms.restore(ctx, rec, snapshot.From{Snapshot: sn}, false, func() error { return nil })
		}
		if err == nil {
			err = w.prewarm(ctx, b)
		}
		if err != nil {
			w.log.Error("pool: restore", "template", name, "err", err)
			if b != nil && b.vm != nil {
				w.vms.teardown(b, err)
			}
			w.nets.detach(id)
			w.reg.remove(id)
			removeDir(rec.Dir, w.log)
			p.setRestoring("")
			return
		}
		p.put(poolEntry{b: b, rec: rec}, false)
		p.setRestoring("")
		if w.closing() {
			w.drainPool(name)
		}
	}
}

// source is the snapshot that pool name restores and the pool's size: a
// template's, or a base snapshot's (base.go).
func (w *warmPools) source(ctx context.Context, name string) (store.Snapshot, int, error) {
	if sn, size, found, ok := w.bases.PoolSource(ctx, name); ok {
		if !found {
			return sn, 0, store.ErrNotFound
		}
		return sn, size, nil
	}
	t, err := w.store.GetTemplate(ctx, name)
	if err != nil {
		return store.Snapshot{}, 0, err
	}
	sn, err := w.store.GetSnapshot(ctx, t.SnapshotID)
	if err != nil {
		w.log.Error("pool: template snapshot", "template", name, "err", err)
	}
	return sn, t.PoolSize, err
}

// prewarm runs a restored pool VM briefly, so its agent is connected and the
// paths a claim takes (the clock, entropy and identity calls, a first
// collected exec) are already translated by the VMM (under TCG a fresh
// process starts with no translated code), then pauses it again. The claim
// sets the clock, entropy and identity again, for real.
func (w *warmPools) prewarm(ctx context.Context, b *runningVM) error {
	if err := b.vm.Resume(ctx); err != nil {
		return err
	}
	if err := b.Reconnect(ctx, w.bootTimeout, health); err != nil {
		return err
	}
	c, err := b.client(ctx)
	if err != nil {
		return err
	}
	if err := snapshot.Freshen(ctx, c, b.id, true); err != nil {
		return err
	}
	if err := snapshot.WarmExecs(ctx, c, w.summary, snapshot.WarmRuns); err != nil {
		return err
	}
	return b.vm.Pause(ctx)
}

// Templates serves the manager's templates: named snapshots, each with a
// warm pool of paused sandboxes that creates claim.
type Templates struct {
	snaps *snapshot.Engine
	store templateStore
	pools *poolRegistry
	warm  *warmPools
	// export, if set, makes a new template's snapshot durable in the
	// snapshot store under refs/templates/<name> (portable.go).
	export func(ctx context.Context, name, snapshotID string) error
}

// templateStore is the persistence of templates.
type templateStore interface {
	GetSnapshot(ctx context.Context, id string) (store.Snapshot, error)
	PutTemplate(ctx context.Context, t store.Template) error
	GetTemplate(ctx context.Context, name string) (store.Template, error)
	ListTemplates(ctx context.Context) ([]store.Template, error)
	DeleteTemplate(ctx context.Context, name string) error
}

// CreateTemplate names a snapshot as a template with a warm pool of
// poolSize paused sandboxes (0 keeps none).
func (tm *Templates) CreateTemplate(ctx context.Context, name, snapshotID string, poolSize int) (TemplateInfo, error) {
	if name == "" || poolSize < 0 || poolSize > MaxPoolSize {
		return TemplateInfo{}, fmt.Errorf("%w: a template needs a name and a pool size of 0..%d", ErrInvalid, MaxPoolSize)
	}
	// Held until the template's record names it, so that no delete takes
	// it in between.
	if _, err := tm.snaps.HoldSnapshot(ctx, snapshotID); err != nil {
		return TemplateInfo{}, snapshotNotFound(err, snapshotID)
	}
	defer tm.snaps.Release(snapshotID)
	if tm.export != nil {
		if err := tm.export(ctx, name, snapshotID); err != nil {
			return TemplateInfo{}, fmt.Errorf("sandbox: template %s: %w", name, err)
		}
	}
	t := store.Template{Name: name, SnapshotID: snapshotID, PoolSize: poolSize, CreatedAt: time.Now().UTC()}
	if err := tm.store.PutTemplate(ctx, t); err != nil {
		return TemplateInfo{}, err
	}
	tm.warm.drainPool(name) // a replaced template's warm sandboxes are stale
	tm.warm.refillLater(name)
	return tm.templateInfo(t), nil
}

// drainPool ends a template's warm sandboxes.
func (w *warmPools) drainPool(name string) {
	for _, e := range w.pools.of(name).drain() {
		w.discard(e)
	}
}

func (tm *Templates) templateInfo(t store.Template) TemplateInfo {
	n := tm.pools.of(t.Name).size()
	return TemplateInfo{Name: t.Name, SnapshotID: t.SnapshotID, PoolSize: t.PoolSize, PoolReady: n, CreatedAt: t.CreatedAt}
}

// templateNotFound names template name in a store's ErrNotFound.
func templateNotFound(err error, name string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrTemplateNotFound, name)
	}
	return err
}

// GetTemplate describes a template.
func (tm *Templates) GetTemplate(ctx context.Context, name string) (TemplateInfo, error) {
	t, err := tm.store.GetTemplate(ctx, name)
	if err != nil {
		return TemplateInfo{}, templateNotFound(err, name)
	}
	return tm.templateInfo(t), nil
}

// ListTemplates describes every template.
func (tm *Templates) ListTemplates(ctx context.Context) ([]TemplateInfo, error) {
	ts, err := tm.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TemplateInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, tm.templateInfo(t))
	}
	return out, nil
}

// DeleteTemplate removes a template and its warm pool (not its snapshot).
func (tm *Templates) DeleteTemplate(ctx context.Context, name string) error {
	if _, err := tm.store.GetTemplate(ctx, name); err != nil {
		return templateNotFound(err, name)
	}
	if err := tm.store.DeleteTemplate(ctx, name); err != nil {
		return err
	}
	tm.warm.drainPool(name)
	return nil
}

// startPools fills every template's pool (at start).
func (w *warmPools) startPools(ctx context.Context) error {
	ts, err := w.store.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range ts {
		w.refillLater(t.Name)
	}
	pool, err := w.bases.DefaultPool(ctx)
	if err != nil {
		w.log.Warn("base snapshot pool", "err", err)
	}
	if pool != "" {
		w.refillLater(pool)
	}
	return nil
}

// stopPools ends every warm sandbox (at stop).
func (w *warmPools) stopPools() {
	for n := range w.pools.all() {
		w.drainPool(n)
	}
}
