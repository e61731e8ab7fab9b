package cloudhypervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// A cloud-hypervisor outlives the hostd that started it (vmm.StartProcess).
// Release lets go of it, leaving the process and its sockets (API, hybrid
// vsock) in the VM's directory; a later hostd's Adopt finds the process by
// its pidfd and reconnects a REST client to the same API socket. Nothing of
// the host's side is kept across: streams are redialled, and the agent's
// sessions live in the guest.

// Adopt reconnects to a cloud-hypervisor that an earlier hostd started or
// restored for cfg (see vmm.Driver): it opens the process by its pid and
// start time (pidfd), checks that it is the VMM serving the API socket in
// cfg.Dir, pings it (bounded by ctx) and checks that vm.info shows a VM
// that is running or paused. The adopted VM is marked as having answered
// a stream, so that its Dial refuses an unserved port at once: its guest
// is up (a VM adopted while its guest still booted sees early Dials
// refused). Its Stop removes the sockets and staging files as a launched
// VM's does. On failure the VMM is left running.
func (d *Driver) Adopt(ctx context.Context, cfg vmm.Config, p vmm.Process) (vmm.VM, error) {
	cfg.Started, cfg.Net = nil, nil // an adoption ignores them (vmm.Driver)
	if err := validate(cfg); err != nil {
		return nil, err
	}
	h, err := vmm.OpenProcess(p)
	if err != nil {
		return nil, fmt.Errorf("cloudhypervisor: adopt %s: %w", cfg.ID, err)
	}
	paths := pathsFor(cfg.Dir)
	log := d.log.With("sandbox_id", cfg.ID)
	v := newVM(paths, newRESTClient(paths.api), adoptProcess(h), log)
	v.addCleanups()
	if err := v.reconnect(ctx); err != nil {
		v.letGo()
		return nil, fmt.Errorf("cloudhypervisor: adopt %s: %w", cfg.ID, err)
	}
	v.guestUp.Store(true)
	log.Info("cloud-hypervisor adopted", "vm_pid", p.PID, "api_socket", paths.api)
	return v, nil
}

// errNoGuest is an adopted VMM that runs no guest (hostd died before the
// boot or the restore, or the guest shut down).
var errNoGuest = errors.New("cloudhypervisor: the vmm runs no guest")

// reconnect checks that the adopted process is the VMM of v's API socket
// and that it runs a guest.
func (v *VM) reconnect(ctx context.Context) error {
	if !servesSocket(v.PID(), v.paths.api) {
		return fmt.Errorf("%w: pid %d is not the cloud-hypervisor of %s", vmm.ErrNotRunning, v.PID(), v.paths.api)
	}
	if err := v.waitReady(ctx); err != nil {
		return err
	}
	ping, err := v.api.Ping(ctx)
	if err != nil {
		return err
	}
	if ping.Pid != nil && int(*ping.Pid) != v.PID() {
		return fmt.Errorf("%w: %s is served by pid %d, not %d", vmm.ErrNotRunning, v.paths.api, *ping.Pid, v.PID())
	}
	info, err := v.api.Info(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		return errNoGuest
	case err != nil:
		return err
	case info.State != chapi.VmStateRunning && info.State != chapi.VmStatePaused:
		return fmt.Errorf("%w: vm state %s", errNoGuest, info.State)
	}
	return nil
}

// servesSocket reports whether pid's command line is a cloud-hypervisor
// started on the API socket api (the argument every launch passes): a check
// on top of the pid and start time, not a way to find a VMM.
func servesSocket(pid int, api string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	i := slices.Index(args, "--api-socket")
	return i >= 0 && i+1 < len(args) && args[i+1] == "path="+api
}

// addCleanups pushes what Stop undoes of a VM in v.paths: its staging and
// restore copies, its vsock socket, the REST client and the API socket.
func (v *VM) addCleanups() {
	p, api := v.paths, v.api
	v.cleanup.add(func() error { return removeAll(p.staging, p.restore, p.vsock) })
	v.cleanup.add(func() error { api.Close(); return removeAll(p.api) })
}

// Release closes the host's connections to cloud-hypervisor (the REST
// client and the streams Dial opened) and leaves the process, its sockets
// and its files running and in place for a later Adopt (vmm.VM).
// Afterwards only PID and Process answer, Done is closed, and Stop does
// nothing. Release of an exited VM returns nil.
func (v *VM) Release() error {
	v.life.Lock()
	defer v.life.Unlock()
	if v.proc.exited() || v.released.Load() {
		return nil
	}
	v.letGo()
	v.log.Info("cloud-hypervisor released; it keeps running", "vm_pid", v.PID())
	return nil
}

// letGo marks v released and closes what the host holds of it.
func (v *VM) letGo() {
	v.mu.Lock()
	v.released.Store(true)
	streams := v.streams
	v.streams = nil
	v.mu.Unlock()
	for s := range streams {
		s.Conn.Close()
	}
	v.api.Close()
	v.proc.release()
	v.finish()
}

// stream is a connection that Dial returned, tracked so that Release can
// close it.
type stream struct {
	net.Conn
	v    *VM
	once sync.Once
}

// track registers c as a stream of v, or closes it when v was released.
func (v *VM) track(c net.Conn) (net.Conn, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.released.Load() {
		c.Close()
		return nil, vmm.ErrNotRunning
	}
	s := &stream{Conn: c, v: v}
	v.streams[s] = true
	return s, nil
}

// Close closes the stream.
func (s *stream) Close() error {
	s.once.Do(func() {
		s.v.mu.Lock()
		delete(s.v.streams, s)
		s.v.mu.Unlock()
	})
	return s.Conn.Close()
}

// CloseWrite half-closes the stream (channel.CloseWrite).
func (s *stream) CloseWrite() error { return channel.CloseWrite(s.Conn) }
