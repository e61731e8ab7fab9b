package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmm"
)

// Files of a QEMU snapshot directory.
const (
	snapMeta   = "vm.json" // snapMetadata
	snapState  = "state"   // the migration stream
	snapMemory = "memory"  // guest RAM, for memory format "file"
)

// Memory formats of a snapshot.
const (
	// memFile: guest RAM is the sparse file "memory"; the migration stream
	// holds device state only. A restore maps the file copy-on-write
	// (MAP_PRIVATE), so VMs restored from one snapshot share its pages.
	memFile = "file"
	// memStream: guest RAM is inside the migration stream. Written by VMs
	// whose memory is a private mapping (restored ones), whose RAM QEMU can
	// only migrate; a restore loads it into a fresh shared memfd.
	memStream = "stream"
)

// snapMetadata describes a snapshot directory.
type snapMetadata struct {
	Backend   string `json:"backend"`
	Memory    string `json:"memory"`
	MemoryMiB int    `json:"memory_mib"`
	VCPUs     int    `json:"vcpus"`
}

// migrationBandwidth lifts QEMU's default cap (~128 MiB/s) on migration.
const migrationBandwidth = 64 << 30

func sharedMemory(mib int) string {
	return fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=/proc/self/fd/3,share=on", mib)
}

func newMemfd(id string, mib int) (*os.File, error) {
	fd, err := unix.MemfdCreate("agentbox-"+id, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("qemu: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:agentbox-"+id)
	if err := f.Truncate(int64(mib) << 20); err != nil {
		f.Close()
		return nil, fmt.Errorf("qemu: memfd size: %w", err)
	}
	return f, nil
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// setMigration lifts the migration bandwidth cap for every VM and turns off
// the announce after an incoming migration (announce-rounds 0).
//
// That announce is for a VM that moved to another host: QEMU has the
// guest's virtio-net send a gratuitous ARP, an unsolicited IPv6 neighbour
// advertisement and MLD reports, in 5 rounds. Every sandbox link here is
// its own tap with the same two MACs (netns.GuestMAC and HostMAC), so
// nothing has to learn where the guest went. Under TCG the first round was
// a tenth of the guest code a fork's wake translates, on the one vCPU the
// wake runs on.
func (vm *VM) setMigration(ctx context.Context) error {
	_, err := vm.qmp.run(ctx, "migrate-set-parameters", map[string]any{
		"max-bandwidth":   int64(migrationBandwidth),
		"announce-rounds": 0,
	})
	return err
}

// ignoreShared sets whether migrations leave shared RAM out of the stream.
// Both ends of one snapshot must agree: on for memory format "file", off
// for "stream". It also turns on the MIGRATION events that waitMigration
// waits for.
func (vm *VM) ignoreShared(ctx context.Context, on bool) error {
	caps := map[string]any{"capabilities": []map[string]any{
		{"capability": "x-ignore-shared", "state": on},
		{"capability": "events", "state": true},
	}}
	_, err := vm.qmp.run(ctx, "migrate-set-capabilities", caps)
	return err
}

// snapMeta describes the snapshot that Snapshot writes of vm.
func (vm *VM) snapMeta() snapMetadata {
	meta := snapMetadata{Backend: "qemu", Memory: memStream, MemoryMiB: vm.cfg.MemoryMiB, VCPUs: vm.cfg.VCPUs}
	if vm.mem != nil {
		meta.Memory = memFile
	}
	return meta
}

// PlanSnapshot writes the metadata of the snapshot that Snapshot will write
// into dir and, for memory format "file", its memory file, sized and empty:
// a VMM staged on dir (Driver.StageRestore) maps that file at its start,
// and the pages Snapshot writes into it later are the ones it sees.
func (vm *VM) PlanSnapshot(ctx context.Context, dir string) error {
	if err := vm.running(); err != nil {
		return err
	}
	meta := vm.snapMeta()
	if meta.Memory == memFile {
		f, err := os.OpenFile(filepath.Join(dir, snapMemory), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("qemu: plan snapshot: %w", err)
		}
		if err := errors.Join(f.Truncate(int64(meta.MemoryMiB)<<20), f.Close()); err != nil {
			return fmt.Errorf("qemu: plan snapshot: %w", err)
		}
	}
	return writeSnapMeta(dir, meta)
}

func writeSnapMeta(dir string, meta snapMetadata) error {
	b, _ := json.Marshal(meta)
	return os.WriteFile(filepath.Join(dir, snapMeta), b, 0o644)
}

// Snapshot writes the paused VM's device state and memory into dir, empty
// or planned (PlanSnapshot). The VM stays paused; Resume continues it.
func (vm *VM) Snapshot(ctx context.Context, dir string) error {
	if err := vm.running(); err != nil {
		return err
	}
	meta := vm.snapMeta()
	// A planned snapshot's metadata stays as it is: a staged restore may
	// be reading it.
	_, statErr := os.Stat(filepath.Join(dir, snapMeta))
	planned := statErr == nil
	if err := vm.ignoreShared(ctx, vm.mem != nil); err != nil {
		return err
	}
	// The paused VM's RAM does not change, and a migration that leaves
	// shared RAM out does not write it: the memory is copied while QEMU
	// writes the device state.
	memDone := make(chan error, 1)
	if vm.mem != nil {
		go func() {
			start := time.Now()
			err := copySparse(filepath.Join(dir, snapMemory), vm.mem, int64(vm.cfg.MemoryMiB)<<20)
			vm.phase("vmm_memory", start)
			memDone <- err
		}()
	} else {
		memDone <- nil
	}
	start := time.Now()
	err := vm.migrateTo(ctx, filepath.Join(dir, snapState))
	vm.phase("vmm_state", start)
	if memErr := <-memDone; memErr != nil {
		err = errors.Join(err, fmt.Errorf("qemu: save memory: %w", memErr))
	}
	if err != nil || planned {
		return err
	}
	return writeSnapMeta(dir, meta)
}

// phase logs a step of Snapshot as hostd's "create phase" debug records
// (path "capture"), which `make bench` prints.
func (vm *VM) phase(name string, start time.Time) {
	vm.log.Debug("create phase", "path", "capture", "phase", name, "took", time.Since(start))
}

// migrateTo migrates the VM into a file and waits for the migration to end.
func (vm *VM) migrateTo(ctx context.Context, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := vm.migrateFD(ctx, "migrate", f); err != nil {
		return err
	}
	return vm.waitFinalized(ctx)
}

// migrateFD hands QEMU f and runs the migration command cmd ("migrate" or
// "migrate-incoming") on it, and waits until the migration ended.
func (vm *VM) migrateFD(ctx context.Context, cmd string, f *os.File) error {
	if _, err := vm.qmp.runFD(ctx, "getfd", map[string]any{"fdname": "snapshot"}, f); err != nil {
		return err
	}
	events, unsubscribe := vm.qmp.subscribe()
	defer unsubscribe()
	if _, err := vm.qmp.run(ctx, cmd, map[string]any{"uri": "fd:snapshot"}); err != nil {
		return err
	}
	return vm.waitMigration(ctx, events)
}

// migrationRecheck is how often waitMigration asks for the migration's
// status while no MIGRATION event says it ended: an event that the
// subscription missed (its buffer full) delays the answer by this much at
// most.
const migrationRecheck = 200 * time.Millisecond

// waitMigration waits until a migration has completed or failed: it asks
// once, then again at each MIGRATION event on events (a subscription made
// before the migration started) and every migrationRecheck.
func (vm *VM) waitMigration(ctx context.Context, events <-chan qmpEvent) error {
	recheck := time.NewTicker(migrationRecheck)
	defer recheck.Stop()
	for {
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := vm.qmp.query(ctx, "query-migrate", &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("qemu: migration %s: %s", st.Status, st.ErrorDesc)
		}
		if err := vm.nextMigrationEvent(ctx, events, recheck.C); err != nil {
			return err
		}
	}
}

// nextMigrationEvent waits for a MIGRATION event that may end a migration,
// or the recheck tick.
func (vm *VM) nextMigrationEvent(ctx context.Context, events <-chan qmpEvent, tick <-chan time.Time) error {
	for {
		select {
		case ev := <-events:
			if ev.Event != "MIGRATION" {
				continue
			}
			var d struct {
				Status string `json:"status"`
			}
			if json.Unmarshal(ev.Data, &d) == nil && !migrationEnded(d.Status) {
				continue
			}
			return nil
		case <-tick:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-vm.done:
			return vmm.ErrNotRunning
		}
	}
}

// migrationEnded reports whether a MIGRATION event's status is final.
func migrationEnded(status string) bool {
	switch status {
	case "completed", "failed", "cancelled":
		return true
	}
	return false
}

// waitFinalized polls until an outgoing migration that has completed is
// also finalized. QEMU reports "completed" before its migration thread
// leaves the finish-migrate run state, and a cont in between fails with
// "Migration is not finalized yet" (seen once in TestConformance).
func (vm *VM) waitFinalized(ctx context.Context) error {
	for {
		var st struct {
			Status string `json:"status"`
		}
		if err := vm.qmp.query(ctx, "query-status", &st); err != nil {
			return err
		}
		if st.Status != "finish-migrate" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-vm.done:
			return vmm.ErrNotRunning
		case <-time.After(time.Millisecond):
		}
	}
}

// copySparse copies the data extents of src (size bytes) into the file at
// path, new or planned (empty, of size bytes), leaving holes where src has
// them (untouched guest memory).
func copySparse(path string, src *os.File, size int64) error {
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := copyExtents(dst, src, size); err != nil {
		dst.Close()
		return err
	}
	return errors.Join(dst.Truncate(size), dst.Close())
}

// copyExtents copies the data extents of src's first size bytes into dst at
// the same offsets, skipping its holes (SEEK_DATA/SEEK_HOLE).
func copyExtents(dst, src *os.File, size int64) error {
	fd := int(src.Fd())
	var buf []byte // for copyRange's fallback
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		if err := copyRange(dst, src, data, hole, &buf); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// copyRange copies bytes [from, to) of src into dst at the same offsets, in
// the kernel (sendfile: no copy through user space), or through *buf where
// the kernel cannot.
func copyRange(dst, src *os.File, from, to int64, buf *[]byte) error {
	if _, err := dst.Seek(from, io.SeekStart); err != nil {
		return err
	}
	for in := from; in < to; {
		n, err := unix.Sendfile(int(dst.Fd()), int(src.Fd()), &in, int(min(to-in, 1<<30)))
		switch {
		case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
			if *buf == nil {
				*buf = make([]byte, 1<<20)
			}
			_, err = io.CopyBuffer(io.NewOffsetWriter(dst, in), io.NewSectionReader(src, in, to-in), *buf)
			return err
		case err != nil:
			return err
		case n == 0:
			return fmt.Errorf("copy: %w at %d of %d", io.ErrUnexpectedEOF, in, to)
		}
	}
	return nil
}
