package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
)

// A sandbox's VMM outlives hostd (vmm.StartProcess). Each VMM's identity
// (pid and start time, never its name) is in a state file in the sandbox's
// directory, written atomically as soon as the process exists; a new hostd
// reads it to re-adopt the VMM (readopt) or to stop one that no sandbox
// owns any more (killVM).

// vmStateFile is the per-VM state file in a sandbox's directory.
const vmStateFile = "vmm.json"

// vmState is the content of vmStateFile.
type vmState struct {
	Backend string      `json:"backend"`
	Process vmm.Process `json:"process"`
}

// writeVMState records the VMM of the sandbox in dir (write to a temporary
// file, sync, rename: a crash leaves the old file or the new one).
func writeVMState(dir string, st vmState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, vmStateFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox: vm state: %w", err)
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("sandbox: vm state: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, vmStateFile))
}

// readVMState reads the VMM recorded in dir.
func readVMState(dir string) (vmState, error) {
	var st vmState
	b, err := os.ReadFile(filepath.Join(dir, vmStateFile))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("sandbox: %s: %w", vmStateFile, err)
	}
	return st, nil
}

// groupLoader is implemented by cgroup managers that can open an existing
// group (*cgroup.Manager).
type groupLoader interface {
	Load(id string) (*cgroup.Group, error)
}

// netReattacher is implemented by network services that can serve a
// sandbox's existing namespace again (*sandboxnet.Service).
type netReattacher interface {
	Reattach(ctx context.Context, id string) (string, error)
	Release(id string)
}

// readopt makes running sandbox rec, whose VMM p outlived the previous
// hostd, live again: its cgroup, the VMM (Driver.Adopt: its control
// socket, QMP or Cloud Hypervisor's REST API, then the agent channel), its
// network's proxy listeners, then what adopt arms for every
// running sandbox (TTL from its creation, idle detection, meters, the
// flight recorder, the console cap) and its mounts. On error the VMM runs
// on; the caller stops it.
func (m *Manager) readopt(ctx context.Context, rec store.Sandbox, p vmm.Process) (err error) {
	v, err := m.opts.Store.GetSandboxVM(ctx, rec.ID)
	if err != nil {
		return err
	}
	if v.PauseDir == "" {
		// A resume that the previous hostd did not finish: the guest runs
		// from the saved state, which is of no more use.
		_ = os.RemoveAll(filepath.Join(rec.Dir, "paused"))
	}
	b := m.newBox(ctx, rec)
	b.overlay, b.snapshotID, b.cwd, b.user = v.Overlay, v.SnapshotID, v.Cwd, v.User
	b.disks = countOverlays(rec.Dir)
	if gl, ok := m.opts.Cgroups.(groupLoader); ok {
		if b.cgroup, b.unhold, err = m.vmms.held.hold(rec.ID, func() (*cgroup.Group, error) { return gl.Load(rec.ID) }); err != nil {
			return err
		}
		// Not adopted: the caller stops the VMM, and the reaper takes the group.
		defer func() {
			if err != nil {
				b.release()
			}
		}()
	}
	cfg := m.vmConfig(rec, v.Overlay)
	vm, err := m.opts.Driver.Adopt(ctx, cfg, p)
	if err != nil {
		return err
	}
	b.vm = vm
	// After the VMM: a dead VMM took its tap, and the namespace's address,
	// with it.
	if err := m.nets.reattach(ctx, rec.ID); err != nil {
		_ = vm.Release()
		return err
	}
	if dr, ok := vm.(vmm.DiskReporter); ok {
		// hostd may have died between a snapshot's disk switch and
		// recording it: the VM knows which overlay it writes.
		if cur, err := dr.DiskPath(ctx, 0); err == nil && cur != b.overlay && filepath.Dir(cur) == rec.Dir {
			m.log.Warn("the vm writes another overlay than recorded; following it", "sandbox_id", rec.ID, "overlay", cur, "recorded", b.overlay)
			b.overlay = cur
		}
	}
	// The vCPUs may be stopped: hostd died mid-snapshot or mid-pause.
	// Resuming a running VM changes nothing.
	if err := vm.Resume(ctx); err != nil {
		_ = vm.Release()
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.opts.BootTimeout)
	defer cancel()
	// The previous hostd may have died in the middle of a frame on the
	// channel (or after a capture that cut one), which swallows the reset
	// marker of the first connection: tryConnect drops it for a padded one.
	if err := b.tryConnect(ctx, adoptAttempt, health); err != nil {
		_ = vm.Release()
		return fmt.Errorf("guest agent did not answer: %w", err)
	}
	if err := setClock(ctx, b); err != nil {
		m.log.Warn("guest clock not set", "sandbox_id", b.id, "err", err)
	}
	m.ttls.rearm(rec)
	if _, err := m.adopt(ctx, b, rec, false); err != nil {
		return err
	}
	if err := m.resumeMounts(ctx, b, rec.Dir); err != nil {
		m.log.Error("mounts not served again after the restart", "sandbox_id", rec.ID, "err", err)
	}
	m.takeover.run(ctx, b)
	m.log.Info("sandbox re-adopted after a hostd restart", "sandbox_id", rec.ID, "vm_pid", p.PID)
	return nil
}

// adoptAttempt bounds one connection of readopt's tryConnect: longer than a restore's
// (connectAttempt), as the first connection to an adopted guest writes the
// 4 MiB pad, which a loaded guest reads slowly.
const adoptAttempt = 15 * time.Second

// reattach serves sandbox id's namespace again (readopt). The entry's NIC
// is nil: the tap is the VMM's alone now, so a pause of this VM drops the
// namespace and the resume makes a new one (dropReattached).
func (n *netAttachments) reattach(ctx context.Context, id string) error {
	ra, ok := n.net.(netReattacher)
	if !ok {
		return nil
	}
	args, err := ra.Reattach(ctx, id)
	if err != nil {
		return fmt.Errorf("sandbox network: %w", err)
	}
	if args == "" {
		return nil
	}
	e := n.reg.get(id)
	e.mu.Lock()
	e.net = netAttachment{attached: true, cmdline: args}
	e.mu.Unlock()
	return nil
}

// dropReattached removes the network of sandbox id, whose VM has just
// stopped, if it was re-attached without its tap: the next VM needs a new
// one.
func (n *netAttachments) dropReattached(id string) {
	if n.net == nil {
		return
	}
	e := n.reg.get(id)
	e.mu.Lock()
	drop := e.net.attached && e.net.net == nil
	e.mu.Unlock()
	if drop {
		n.detach(id)
	}
}

// release lets go of sandbox id's network and leaves it for the next hostd.
func (n *netAttachments) release(id string) {
	if ra, ok := n.net.(netReattacher); ok {
		ra.Release(id)
	}
}

// Release ends the manager's work and leaves every running sandbox running
// for the next hostd on the same data directory: its timers stop, its
// streams and agent connection close, the VMM is released
// (vmm.VM.Release), the proxy's listeners close (the namespace stays).
// Connections through the proxy or the port proxy end. A paused sandbox
// stays paused. It waits for the background work, like Close.
func (m *Manager) Release(ctx context.Context) error {
	m.stopAccepting()
	var errs []error
	for _, b := range m.reg.boxes() {
		if !m.reg.forget(b) {
			continue
		}
		b.op.Lock() // let a running snapshot or pause finish
		b.end(ErrHostdStopped)
		b.closeAgent()
		errs = append(errs, b.vm.Release())
		m.nets.release(b.id)
		b.op.Unlock()
		m.log.Info("sandbox left running for the next hostd", "sandbox_id", b.id, "vm_pid", b.vm.PID())
	}
	m.bg.Wait()
	m.snaps.Close()
	return errors.Join(errs...)
}

// ErrHostdStopped ends the calls of a sandbox that hostd left running when
// it stopped. It is an ErrAgentLost (the API's agent_unreachable): the
// sandbox runs on, and the next hostd serves it again.
var ErrHostdStopped = fmt.Errorf("%w: hostd stopped; the sandbox runs on", ErrAgentLost)

// stopAccepting begins Close and Release: no new background work, no
// timers, no pool refills.
func (m *Manager) stopAccepting() {
	m.bgMu.Lock()
	m.closed = true
	m.bgMu.Unlock()
	for _, e := range m.reg.entries() {
		e.stopTimers()
	}
	m.warm.stopPools()
}
