package snapshot

import (
	"context"

	"github.com/agentbox/agentbox/internal/steps"
	"github.com/agentbox/agentbox/vmm"
)

// Copy is one VM to make from a snapshot. The engine makes its disk and
// its VM; the caller owns the rest of the sandbox and hands it in as
// hooks: the network it makes meanwhile, and the placement of the VMM
// process (its user, cgroup and limits).
type Copy struct {
	From From
	// Overlay is the copy's new disk file, over the snapshot's layer.
	Overlay string
	// NetReady waits for the copy's network, made while the disk is.
	NetReady func() error
	// Config returns the copy's VM configuration, placed; Unplace undoes
	// the placement (the cgroup) after a later step failed.
	Config  func() (vmm.Config, error)
	Unplace func()
	// Phase, if set, is told the name of each step once it ran (the
	// caller's phase log: overlay, network_wait, cgroup, vmm_stage,
	// capture_wait, vmm_restore).
	Phase func(name string)
}

// StartCopy makes c's disk and restores its VM, which stays paused: the
// caller wakes it (Wake) or keeps it asleep (a warm pool). A copy of a
// snapshot being captured (c.From.Gate) has its VMM staged now and loads
// the snapshot once the capture ended and the snapshot passed its check.
func (e *Engine) StartCopy(ctx context.Context, d vmm.Driver, c Copy) (vmm.VM, error) {
	sn := c.From.Snapshot
	var cfg vmm.Config
	var vm vmm.VM
	var staged vmm.StagedVM
	list := steps.List{
		{Name: "overlay", Run: func(ctx context.Context) error { // checksums (first use) and the overlay
			if c.From.Gate != nil {
				return e.Overlay(ctx, sn, c.Overlay) // checked once captured
			}
			return e.Prepare(ctx, sn, c.Overlay)
		}},
		{Name: "network_wait", Run: func(context.Context) error { return c.NetReady() }},
		{Name: "cgroup", Run: func(context.Context) error {
			var err error
			cfg, err = c.Config()
			memoryPolicy(&cfg, sn)
			return err
		}, Undo: c.Unplace},
	}
	if c.From.Gate == nil {
		list = append(list, steps.Step{Name: "vmm_restore", Run: func(ctx context.Context) error { // process spawn, QMP, incoming migration
			var err error
			vm, err = e.Restore(ctx, d, cfg, sn)
			return err
		}})
	} else {
		list = append(list,
			steps.Step{Name: "vmm_stage", Run: func(ctx context.Context) error { // process spawn, QMP
				var err error
				staged, err = e.Stage(ctx, d, cfg, sn)
				return err
			}, Undo: func() { _ = staged.Stop(context.WithoutCancel(ctx)) }},
			steps.Step{Name: "capture_wait", Run: func(ctx context.Context) error {
				if err := c.From.Gate.Wait(ctx); err != nil {
					return err
				}
				return e.Check(sn)
			}},
			steps.Step{Name: "vmm_restore", Run: func(ctx context.Context) error { // the incoming migration
				vm = staged
				return staged.Load(ctx)
			}})
	}
	if err := list.Run(ctx, c.Phase); err != nil {
		return nil, err
	}
	return vm, nil
}

// memoryPolicy sets how a copy of sn holds its memory. A copy of a base
// snapshot runs on its own memory copy, as a booted VM does, so that its
// own snapshots' memory is a file that their forks share; a copy of any
// other snapshot maps the snapshot's memory file copy-on-write.
func memoryPolicy(cfg *vmm.Config, sn Record) {
	cfg.OwnMemory = sn.Kind == KindBase
}
