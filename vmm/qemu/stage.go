package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

var (
	_ vmm.Stager          = (*Driver)(nil)
	_ vmm.StagedVM        = (*VM)(nil)
	_ vmm.SnapshotPlanner = (*VM)(nil)
)

// incoming is what a VM launched for a restore still has to load.
type incoming struct {
	dir  string
	meta snapMetadata
	// own is set when the VM runs on its own copy of the snapshot's memory
	// file (vmm.Config.OwnMemory). copied, if set, delivers the end of
	// that copy, started with the launch; without it, Load copies.
	own    bool
	copied chan error
}

// Restore starts a VM from a snapshot that Snapshot wrote into dir. The VM
// is paused when Restore returns.
func (d *Driver) Restore(ctx context.Context, cfg vmm.Config, dir string) (vmm.VM, error) {
	vm, err := d.stage(ctx, cfg, dir, true)
	if err != nil {
		return nil, err
	}
	if err := vm.Load(ctx); err != nil {
		return nil, err
	}
	return vm, nil
}

// StageRestore launches QEMU, waiting for an incoming migration, for the
// snapshot that a VM planned into dir (VM.PlanSnapshot) and may still be
// writing. Its memory file exists, sized, from the plan on: QEMU maps it,
// and touches none of its pages before Load.
func (d *Driver) StageRestore(ctx context.Context, cfg vmm.Config, dir string) (vmm.StagedVM, error) {
	return d.stage(ctx, cfg, dir, false)
}

// stage launches QEMU for a restore from dir, whose snapshot is complete
// when complete is set: then a copy of its memory (OwnMemory) is made
// while QEMU starts.
func (d *Driver) stage(ctx context.Context, cfg vmm.Config, dir string, complete bool) (*VM, error) {
	meta, err := readSnapMeta(dir)
	if err != nil {
		return nil, err
	}
	if cfg.VCPUs != meta.VCPUs || cfg.MemoryMiB != meta.MemoryMiB {
		return nil, fmt.Errorf("%w: snapshot has %d vcpus and %d MiB, config %d and %d",
			vmm.ErrInvalidConfig, meta.VCPUs, meta.MemoryMiB, cfg.VCPUs, cfg.MemoryMiB)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	in := &incoming{dir: dir, meta: meta, own: meta.Memory == memFile && cfg.OwnMemory}
	var o launchOpts
	memory := sharedMemory(cfg.MemoryMiB)
	if meta.Memory == memFile && !in.own {
		memory = fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=off", cfg.MemoryMiB, filepath.Join(dir, snapMemory))
	} else {
		if o.mem, err = newMemfd(cfg.ID, cfg.MemoryMiB); err != nil {
			return nil, err
		}
		defer o.mem.Close()
	}
	if in.own && complete {
		if in.copied, err = copyWhile(o.mem, filepath.Join(dir, snapMemory)); err != nil {
			return nil, err
		}
	}
	vm, err := d.launch(ctx, cfg, append(d.args(cfg, memory), incomingArgs...), o)
	if err != nil {
		if in.copied != nil {
			<-in.copied
		}
		return nil, err
	}
	vm.incoming = in
	return vm, nil
}

// incomingArgs start a QEMU paused and waiting for a migration that
// migrate-incoming starts later: every restore's.
var incomingArgs = []string{"-S", "-incoming", "defer"}

// copyWhile copies the memory file at path into the memfd mem in the
// background: QEMU maps the memfd at its start and touches none of its
// pages before an incoming migration, so the copy runs while it starts.
// The channel delivers the copy's end.
func copyWhile(mem *os.File, path string) (chan error, error) {
	dst, err := dupFile(mem)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		defer dst.Close()
		done <- copyInto(dst, path)
	}()
	return done, nil
}

// Load loads the snapshot of a VM that Restore or StageRestore launched:
// its memory, for a VM on its own copy, and its device state. It fails,
// stopping the VM, when the snapshot is incomplete or does not match.
func (vm *VM) Load(ctx context.Context) error {
	in := vm.incoming
	if in == nil {
		return errors.New("qemu: load: the vm has no restore to load")
	}
	vm.incoming = nil
	if err := vm.load(ctx, in); err != nil {
		if vm.exitedUnsaid(err) {
			err = errors.Join(err, vm.exitedErr("restore"))
		}
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return errors.Join(fmt.Errorf("qemu: restore: %w", err), vm.Stop(stopCtx), vm.qemuLog())
	}
	return nil
}

// exitedUnsaid reports whether QEMU has exited and err does not say so
// (vmm.ErrNotRunning). On QMP's end (errQMPClosed), which comes before the
// exit is reaped, it gives the exit a moment.
func (vm *VM) exitedUnsaid(err error) bool {
	if errors.Is(err, vmm.ErrNotRunning) {
		return false
	}
	if errors.Is(err, errQMPClosed) {
		t := time.NewTimer(exitReapWait)
		defer t.Stop()
		select {
		case <-vm.done:
		case <-t.C:
		}
	}
	return vm.running() != nil
}

// exitReapWait is how long a failed load waits for QEMU's exit after its
// QMP connection closed.
const exitReapWait = time.Second

func (vm *VM) load(ctx context.Context, in *incoming) error {
	var err error
	switch {
	case in.copied != nil:
		err = <-in.copied
	case in.own:
		err = copyInto(vm.mem, filepath.Join(in.dir, snapMemory))
	}
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	if err := vm.ignoreShared(ctx, in.meta.Memory == memFile); err != nil {
		return err
	}
	return vm.migrateFrom(ctx, filepath.Join(in.dir, snapState))
}

func readSnapMeta(dir string) (snapMetadata, error) {
	var meta snapMetadata
	b, err := os.ReadFile(filepath.Join(dir, snapMeta))
	if errors.Is(err, os.ErrNotExist) {
		return meta, fmt.Errorf("%w: %s is not a qemu snapshot (no %s)", vmm.ErrUnsupported, dir, snapMeta)
	}
	if err != nil {
		return meta, err
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return meta, fmt.Errorf("qemu: %s: %w", snapMeta, err)
	}
	if meta.Backend != "qemu" {
		return meta, fmt.Errorf("%w: snapshot was made by %q, not qemu", vmm.ErrUnsupported, meta.Backend)
	}
	return meta, nil
}

// migrateFrom loads the migration stream at path into a VM started with
// -incoming defer, and waits until it is loaded.
func (vm *VM) migrateFrom(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return vm.migrateFD(ctx, "migrate-incoming", f)
}

// copyInto copies the data extents of the sparse file at path into dst at
// the same offsets (dst is a fresh memfd: its holes read as zeros).
func copyInto(dst *os.File, path string) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	return copyExtents(dst, src, fi.Size())
}
