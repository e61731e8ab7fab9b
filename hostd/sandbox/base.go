package sandbox

import (
	"context"
	"errors"
	"os"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/snapshot"
)

// Boot choices of a create (CreateOptions.Boot).
const (
	// BootAuto restores the built-in base snapshot when there is one (the
	// default).
	BootAuto = ""
	// BootCold boots the base image even when a base snapshot exists.
	BootCold = "cold"
)

// basesConfig is what of the manager's options the base snapshots
// (snapshot.Bases) depend on.
func basesConfig(o Options) snapshot.BasesConfig {
	return snapshot.BasesConfig{On: o.BaseSnapshots, PoolSize: o.BasePool, Watch: o.Recorder != nil, Backend: o.Driver.Name(),
		Default: snapshot.Shape{VCPUs: o.DefaultVCPUs, MemoryMiB: o.DefaultMemoryMiB, NIC: o.Network != nil},
		Kernel:  o.Kernel, Initramfs: o.Initramfs, BaseImage: o.BaseImage}
}

// basePlan picks how a resolved create with no template or snapshot
// starts (snapshot.Bases.Plan); the zero plan boots, when the create
// cannot be served from a base snapshot (its own base, kernel or
// initramfs, a cold boot asked for, base snapshots off).
func (m *Manager) basePlan(ctx context.Context, opts CreateOptions) snapshot.BasePlan {
	if !m.bases.On() || opts.Boot == BootCold || opts.BaseImage != "" || opts.Kernel != "" || opts.Initramfs != "" {
		return snapshot.BasePlan{}
	}
	nic := m.opts.Network != nil && opts.Network != nil && opts.Network.Mode != egress.ModeNone
	return m.bases.Plan(ctx, snapshot.Shape{VCPUs: opts.VCPUs, MemoryMiB: opts.MemoryMiB, NIC: nic})
}

// bootAfterBadBase serves a create whose base snapshot did not restore
// (rerr: its files damaged, or written by another QEMU) with a cold boot,
// which becomes the shape's new base snapshot unless one is being made.
// The bad one is set aside for this hostd's later creates, and removed
// when nothing uses it. A create whose own time ran out just fails.
func (m *Manager) bootAfterBadBase(ctx context.Context, rec store.Sandbox, opts CreateOptions, sn store.Snapshot,
	b *runningVM, rerr error, netReady func() error) (*runningVM, error) {
	if ctx.Err() != nil {
		return b, rerr
	}
	m.log.Warn("base snapshot did not restore; booting cold", "sandbox_id", rec.ID, "snapshot_id", sn.ID, "err", rerr)
	m.bases.SetBad(sn.ID)
	if b != nil {
		b.removeCgroup()
	}
	if err := os.RemoveAll(rec.Dir); err != nil {
		return nil, errors.Join(rerr, err)
	}
	b, err := m.boot(ctx, rec, opts, netReady)
	if err != nil || !m.bases.ClaimBuild(sn.CacheKey, true) {
		return b, err
	}
	defer m.bases.ClaimBuild(sn.CacheKey, false)
	if err := m.captureBase(ctx, b, rec, sn.CacheKey); err != nil {
		return b, err
	}
	if err := m.snaps.Delete(ctx, sn.ID); err == nil {
		m.log.Info("bad base snapshot removed", "snapshot_id", sn.ID)
	}
	return b, nil
}

// captureBase makes freshly booted b the base snapshot of key and fills
// key's warm pool, if it has one; a failed capture ends b.
func (m *Manager) captureBase(ctx context.Context, b *runningVM, rec store.Sandbox, key string) error {
	err := func() error {
		c, err := b.client(ctx)
		if err != nil {
			return err
		}
		src := &snapshot.Source{SandboxID: b.id, VM: b.vm, Overlay: b.overlay, ParentID: b.snapshotID, NextOverlay: b.nextOverlay,
			VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, Cwd: b.cwd}
		if err := m.bases.Capture(ctx, src, c, key); err != nil {
			return err
		}
		b.overlay, b.snapshotID = src.Overlay, src.ParentID
		return nil
	}()
	if err != nil {
		_ = b.vm.Stop(context.WithoutCancel(ctx))
		b.end(err)
		return err
	}
	if p := m.bases.Pool(key); p != "" {
		m.warm.refillLater(p)
	}
	return nil
}
