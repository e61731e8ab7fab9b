package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/hostd/store"
)

// MaxPoolSize bounds a template's warm pool.
const MaxPoolSize = 16

// pool keeps a template's warm sandboxes: restored from its snapshot and
// paused, waiting to be claimed.
type pool struct {
	mu      sync.Mutex
	ready   []poolEntry
	filling bool
}

type poolEntry struct {
	b   *box
	rec store.Sandbox
}

func (m *Manager) poolOf(name string) *pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pools[name]
	if p == nil {
		p = &pool{}
		m.pools[name] = p
	}
	return p
}

// claim takes a warm sandbox of opts.Template, if one is ready, and wakes
// it as a new sandbox. The pool refills in the background.
func (m *Manager) claim(ctx context.Context, opts CreateOptions) (*box, store.Sandbox, bool) {
	p := m.poolOf(opts.Template)
	defer m.refillLater(opts.Template)
	for {
		p.mu.Lock()
		if len(p.ready) == 0 {
			p.mu.Unlock()
			return nil, store.Sandbox{}, false
		}
		e := p.ready[0]
		p.ready = p.ready[1:]
		p.mu.Unlock()
		e.rec.Env, e.rec.Metadata, e.rec.TimeoutS, e.rec.CreatedAt = opts.Env, opts.Metadata, opts.TimeoutS, time.Now().UTC()
		if err := m.opts.Store.PutSandbox(ctx, e.rec); err != nil {
			m.discard(e)
			return nil, store.Sandbox{}, false
		}
		if err := m.claimPolicy(ctx, e.b.id, opts.Network); err != nil {
			m.log.Warn("warm sandbox cannot take the policy; booting instead", "sandbox_id", e.b.id, "err", err)
			p.mu.Lock()
			p.ready = append([]poolEntry{e}, p.ready...)
			p.mu.Unlock()
			_ = m.opts.Store.DeleteSandbox(context.WithoutCancel(ctx), e.b.id)
			return nil, store.Sandbox{}, false
		}
		if err := m.wake(ctx, e.b, true); err != nil {
			m.log.Warn("warm sandbox did not wake; trying another", "sandbox_id", e.b.id, "err", err)
			m.discard(e)
			_ = m.opts.Store.DeleteSandbox(context.WithoutCancel(ctx), e.b.id)
			continue
		}
		m.log.Info("warm sandbox claimed", "sandbox_id", e.b.id, "template", opts.Template)
		return e.b, e.rec, true
	}
}

func (m *Manager) discard(e poolEntry) {
	m.teardown(e.b, errors.New("sandbox: discarded from the warm pool"))
	m.dropMeter(e.b.id)
}

func (m *Manager) refillLater(name string) { go m.refill(context.Background(), name) }

// refill restores sandboxes into a template's pool until it holds its size.
func (m *Manager) refill(ctx context.Context, name string) {
	p := m.poolOf(name)
	p.mu.Lock()
	if p.filling {
		p.mu.Unlock()
		return
	}
	p.filling = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.filling = false
		p.mu.Unlock()
	}()
	for !m.closing.Load() {
		t, err := m.opts.Store.GetTemplate(ctx, name)
		if err != nil {
			return // deleted
		}
		p.mu.Lock()
		n := len(p.ready)
		p.mu.Unlock()
		if n >= t.PoolSize {
			return
		}
		sn, err := m.opts.Store.GetSnapshot(ctx, t.SnapshotID)
		if err != nil {
			m.log.Error("pool: template snapshot", "template", name, "err", err)
			return
		}
		id := newSandboxID()
		rec := store.Sandbox{ID: id, State: string(StateCreating), VCPUs: sn.VCPUs, MemoryMiB: sn.MemoryMiB, Env: sn.Env,
			Dir: filepath.Join(m.opts.DataDir, "sandboxes", id)}
		var b *box
		err = m.attachNetwork(ctx, id, m.defaultPolicy())
		if err == nil {
			b, err = m.restore(ctx, rec, sn, false)
		}
		if err == nil {
			err = m.prewarm(ctx, b)
		}
		if err != nil {
			m.log.Error("pool: restore", "template", name, "err", err)
			if b != nil && b.vm != nil {
				m.teardown(b, err)
			}
			m.detachNetwork(id)
			m.removeDir(rec.Dir, m.log)
			return
		}
		p.mu.Lock()
		p.ready = append(p.ready, poolEntry{b: b, rec: rec})
		p.mu.Unlock()
		if m.closing.Load() {
			m.drainPool(name)
		}
	}
}

// prewarm runs a restored pool VM briefly, so its agent is connected and the
// paths a claim takes (agent calls, a first exec) are already translated by
// the VMM (under TCG a fresh process starts with no translated code), then
// pauses it again.
func (m *Manager) prewarm(ctx context.Context, b *box) error {
	if err := b.vm.Resume(ctx); err != nil {
		return err
	}
	if err := m.connect(ctx, b); err != nil {
		return err
	}
	c, err := m.agent(ctx, b)
	if err != nil {
		return err
	}
	for range 2 {
		id, err := c.Start(ctx, agentclient.Command{Argv: []string{"true"}})
		if err != nil {
			return err
		}
		if _, err := c.Follow(ctx, id, 0, func(agentclient.Output) error { return nil }); err != nil {
			return err
		}
	}
	return b.vm.Pause(ctx)
}

// CreateTemplate names a snapshot as a template with a warm pool of
// poolSize paused sandboxes (0 keeps none).
func (m *Manager) CreateTemplate(ctx context.Context, name, snapshotID string, poolSize int) (TemplateInfo, error) {
	if name == "" || poolSize < 0 || poolSize > MaxPoolSize {
		return TemplateInfo{}, fmt.Errorf("%w: a template needs a name and a pool size of 0..%d", ErrInvalid, MaxPoolSize)
	}
	if _, err := m.opts.Store.GetSnapshot(ctx, snapshotID); err != nil {
		return TemplateInfo{}, m.notFound(err, snapshotID)
	}
	t := store.Template{Name: name, SnapshotID: snapshotID, PoolSize: poolSize, CreatedAt: time.Now().UTC()}
	if err := m.opts.Store.PutTemplate(ctx, t); err != nil {
		return TemplateInfo{}, err
	}
	m.drainPool(name) // a replaced template's warm sandboxes are stale
	m.refillLater(name)
	return m.templateInfo(t), nil
}

// drainPool ends a template's warm sandboxes.
func (m *Manager) drainPool(name string) {
	p := m.poolOf(name)
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, e := range ready {
		m.discard(e)
	}
}

func (m *Manager) templateInfo(t store.Template) TemplateInfo {
	p := m.poolOf(t.Name)
	p.mu.Lock()
	n := len(p.ready)
	p.mu.Unlock()
	return TemplateInfo{Name: t.Name, SnapshotID: t.SnapshotID, PoolSize: t.PoolSize, PoolReady: n, CreatedAt: t.CreatedAt}
}

// GetTemplate describes a template.
func (m *Manager) GetTemplate(ctx context.Context, name string) (TemplateInfo, error) {
	t, err := m.opts.Store.GetTemplate(ctx, name)
	if err != nil {
		return TemplateInfo{}, m.notFound(err, name)
	}
	return m.templateInfo(t), nil
}

// ListTemplates describes every template.
func (m *Manager) ListTemplates(ctx context.Context) ([]TemplateInfo, error) {
	ts, err := m.opts.Store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TemplateInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, m.templateInfo(t))
	}
	return out, nil
}

// DeleteTemplate removes a template and its warm pool (not its snapshot).
func (m *Manager) DeleteTemplate(ctx context.Context, name string) error {
	if _, err := m.opts.Store.GetTemplate(ctx, name); err != nil {
		return m.notFound(err, name)
	}
	if err := m.opts.Store.DeleteTemplate(ctx, name); err != nil {
		return err
	}
	m.drainPool(name)
	return nil
}

// startPools fills every template's pool (at start).
func (m *Manager) startPools(ctx context.Context) error {
	ts, err := m.opts.Store.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range ts {
		m.refillLater(t.Name)
	}
	return nil
}

// stopPools ends every warm sandbox (at stop).
func (m *Manager) stopPools() {
	m.mu.Lock()
	names := make([]string, 0, len(m.pools))
	for n := range m.pools {
		names = append(names, n)
	}
	m.mu.Unlock()
	for _, n := range names {
		m.drainPool(n)
	}
}
