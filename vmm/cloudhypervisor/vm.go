package cloudhypervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// apiClient is what a VM needs of Cloud Hypervisor's REST API. restClient
// implements it over the API socket; tests fake it.
type apiClient interface {
	Ping(ctx context.Context) (chapi.VmmPingResponse, error)
	Create(ctx context.Context, cfg chapi.VmConfig) error
	// Do sends one of the bodyless actions (boot, pause, resume, shutdown,
	// delete, vmm.shutdown).
	Do(ctx context.Context, a action) error
	Snapshot(ctx context.Context, destURL string) error
	// Restore and AddNet send files as SCM_RIGHTS with the request.
	Restore(ctx context.Context, cfg restoreConfig, files []*os.File) error
	AddNet(ctx context.Context, cfg chapi.NetConfig, files []*os.File) (*chapi.PciDeviceInfo, error)
	Info(ctx context.Context) (chapi.VmInfo, error)
	Counters(ctx context.Context) (chapi.VmCounters, error)
	Close()
}

// Stop's phases. Each is cut short when Stop's ctx ends.
const (
	apiGrace  = 2 * time.Second // vm.shutdown + vmm.shutdown, then the exit
	termGrace = 2 * time.Second // after SIGTERM
	killWait  = 5 * time.Second // after SIGKILL, even when ctx has ended
)

// VM is one cloud-hypervisor process running one guest: one this hostd
// launched, or one it adopted (Driver.Adopt).
type VM struct {
	paths   vmPaths
	api     apiClient
	proc    *process
	log     *slog.Logger
	cleanup cleanup
	guestUp atomic.Bool // a stream of this VM has been answered

	done     chan struct{} // the process exited, or the VM was released
	doneOnce sync.Once
	life     sync.Mutex // serialises Stop and Release
	released atomic.Bool
	mu       sync.Mutex
	streams  map[*stream]bool // open Dial streams, closed by Release
}

var _ vmm.VM = (*VM)(nil)

// newVM is the VM of proc, whose API socket api serves, and starts
// watching its exit.
func newVM(paths vmPaths, api apiClient, proc *process, log *slog.Logger) *VM {
	v := &VM{paths: paths, api: api, proc: proc, log: log, done: make(chan struct{}), streams: map[*stream]bool{}}
	go v.watch()
	return v
}

// errReleased is what Wait returns after Release.
var errReleased = errors.New("cloudhypervisor: vm released to a later hostd")

// PID is the cloud-hypervisor process id.
func (v *VM) PID() int { return v.proc.pid() }

// Done is closed once the process has exited, or the VM was released.
func (v *VM) Done() <-chan struct{} { return v.done }

// Wait blocks until the process exits or ctx ends. For an adopted VM it
// returns nil: the exit status is the process's parent's.
func (v *VM) Wait(ctx context.Context) error {
	select {
	case <-v.done:
		if v.released.Load() {
			return errReleased
		}
		return v.proc.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gone reports whether the VM can take no more calls: its process has
// exited or it was released.
func (v *VM) gone() bool {
	select {
	case <-v.done:
		return true
	default:
		return v.released.Load()
	}
}

// finish closes done, once.
func (v *VM) finish() { v.doneOnce.Do(func() { close(v.done) }) }

// errNoAnswer is a stream that Cloud Hypervisor closed before answering
// CONNECT: the guest sent a reset or did not answer in time.
var errNoAnswer = errors.New("cloudhypervisor: the guest closed the stream")

// Dial connects to guest port through the VM's hybrid vsock socket: a unix
// connection to the socket, then "CONNECT <port>\n" answered by "OK ...".
//
// Cloud Hypervisor answers a port without a listener and a guest that is
// not up yet (no vsock driver, no agent) alike: it closes the stream. So
// until a first stream of this VM has been answered, Dial retries until ctx
// ends, and the first Dial after Start or Restore returns once guestinit
// serves; afterwards a closed stream fails at once with channel.ErrRefused.
// Cloud Hypervisor resets vsock connections on restore; callers dial again.
func (v *VM) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	delay := 10 * time.Millisecond
	for {
		if v.gone() {
			return nil, vmm.ErrNotRunning
		}
		c, err := v.dialOnce(ctx, port)
		switch {
		case err == nil:
			v.guestUp.Store(true)
			return v.track(c)
		case !errors.Is(err, errNoAnswer):
			return nil, err
		case v.guestUp.Load():
			return nil, fmt.Errorf("%w: vsock port %d: %w", channel.ErrRefused, port, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("cloudhypervisor: vsock port %d: the guest never answered: %w", port, ctx.Err())
		case <-v.done:
			t.Stop()
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// dialOnce makes one attempt; a stream closed before the answer is
// errNoAnswer.
func (v *VM) dialOnce(ctx context.Context, port uint32) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", v.paths.vsock)
	if err != nil {
		return nil, fmt.Errorf("cloudhypervisor: dial vsock: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	c, err := channel.Connect(conn, port)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		if ctx.Err() == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			return nil, fmt.Errorf("%w: %w", errNoAnswer, err)
		}
		return nil, ctxErr(ctx, fmt.Errorf("cloudhypervisor: vsock port %d: %w", port, err))
	}
	_ = conn.SetDeadline(time.Time{})
	return c, nil
}

// Pause stops the vCPUs.
func (v *VM) Pause(ctx context.Context) error { return v.do(ctx, actPause) }

// Resume restarts the vCPUs.
func (v *VM) Resume(ctx context.Context) error { return v.do(ctx, actResume) }

func (v *VM) do(ctx context.Context, a action) error {
	if v.gone() {
		return vmm.ErrNotRunning
	}
	return v.api.Do(ctx, a)
}

// Snapshot writes the paused VM's memory and device state into dir, which
// must exist and be empty, and marks it as a cloud-hypervisor snapshot.
//
// Cloud Hypervisor writes into a staging directory inside the VM's own
// directory, which its Landlock rules allow, and the files are then renamed
// into dir.
func (v *VM) Snapshot(ctx context.Context, dir string) error {
	if v.gone() {
		return vmm.ErrNotRunning
	}
	if err := checkEmptyDir(dir); err != nil {
		return err
	}
	staging := v.paths.staging
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("cloudhypervisor: clear snapshot staging: %w", err)
	}
	if err := os.Mkdir(staging, snapshotMode); err != nil {
		return fmt.Errorf("cloudhypervisor: snapshot staging: %w", err)
	}
	if err := v.api.Snapshot(ctx, fileURL(staging)); err != nil {
		return errors.Join(err, os.RemoveAll(staging))
	}
	if err := moveSnapshot(staging, dir); err != nil {
		return errors.Join(err, os.RemoveAll(staging))
	}
	return writeMarker(dir)
}

// Info returns Cloud Hypervisor's view of the VM (vm.info).
func (v *VM) Info(ctx context.Context) (chapi.VmInfo, error) {
	if v.gone() {
		return chapi.VmInfo{}, vmm.ErrNotRunning
	}
	return v.api.Info(ctx)
}

// Counters returns the per-device counters (vm.counters).
func (v *VM) Counters(ctx context.Context) (chapi.VmCounters, error) {
	if v.gone() {
		return nil, vmm.ErrNotRunning
	}
	return v.api.Counters(ctx)
}

// AddNet adds a virtio-net device backed by tap, an open tap device (for
// example one created in the sandbox's network namespace), which is sent to
// Cloud Hypervisor as SCM_RIGHTS. id names the device; mac may be empty.
// Restoring a snapshot of this VM needs a new tap for id: see
// Driver.RestoreWithNets.
func (v *VM) AddNet(ctx context.Context, id, mac string, tap *os.File) error {
	cfg := chapi.NetConfig{Id: &id}
	if mac != "" {
		cfg.Mac = &mac
	}
	return v.addNet(ctx, cfg, tap)
}

func (v *VM) addNet(ctx context.Context, cfg chapi.NetConfig, tap *os.File) error {
	if v.gone() {
		return vmm.ErrNotRunning
	}
	_, err := v.api.AddNet(ctx, cfg, []*os.File{tap})
	return err
}

// Stop ends the VM: vm.shutdown and vmm.shutdown through the API, then
// SIGTERM, then SIGKILL, each phase cut short when ctx ends. It returns once
// the process has exited (an adopted one: and its parent has reaped it, or
// a bounded wait for that has passed) and the VM's sockets are gone. Stop
// of a released VM does nothing: the VMM is a later hostd's.
func (v *VM) Stop(ctx context.Context) error {
	v.life.Lock()
	defer v.life.Unlock()
	if v.released.Load() {
		return nil
	}
	var err error
	if !v.proc.exited() {
		err = v.end(ctx)
	}
	if v.proc.exited() {
		v.finish() // Done is closed when Stop returns, not later by watch
	}
	return errors.Join(err, v.cleanup.run())
}

func (v *VM) end(ctx context.Context) error {
	log := v.log.With("vm_pid", v.PID())
	if v.shutdownViaAPI(ctx) && v.proc.waitFor(ctx, apiGrace) {
		return nil
	}
	log.Info("cloud-hypervisor did not shut down through its API; sending SIGTERM")
	if err := v.proc.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if v.proc.waitFor(ctx, termGrace) {
		return nil
	}
	log.Warn("cloud-hypervisor ignored SIGTERM; sending SIGKILL")
	return v.kill(context.WithoutCancel(ctx))
}

// shutdownViaAPI asks for vm.shutdown (which fails harmlessly on a VM that
// is not booted) and vmm.shutdown, and reports whether the VMM agreed to
// exit.
func (v *VM) shutdownViaAPI(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, apiGrace)
	defer cancel()
	if err := v.api.Do(ctx, actShutdownVM); err != nil {
		v.log.Debug("vm.shutdown", "err", err)
	}
	if err := v.api.Do(ctx, actShutdownVMM); err != nil {
		v.log.Debug("vmm.shutdown", "err", err)
		return false
	}
	return true
}

// kill sends SIGKILL and waits (bounded) for the exit.
func (v *VM) kill(ctx context.Context) error {
	if err := v.proc.signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !v.proc.waitFor(ctx, killWait) {
		return fmt.Errorf("cloudhypervisor: pid %d did not exit %v after SIGKILL", v.PID(), killWait)
	}
	return nil
}

// abort ends a VM whose start or restore failed, and returns cause joined
// with any cleanup error.
func (v *VM) abort(ctx context.Context, cause error) error {
	ctx = context.WithoutCancel(ctx)
	var err error
	if !v.proc.exited() {
		err = v.kill(ctx)
	}
	return errors.Join(cause, err, v.cleanup.run())
}

// watch logs the process's exit and closes done.
func (v *VM) watch() {
	<-v.proc.done
	if !v.released.Load() {
		v.log.Info("cloud-hypervisor exited", "vm_pid", v.PID(), "err", v.proc.err)
	}
	v.finish()
}

// fileURL is the file:// URL of an absolute path as Cloud Hypervisor reads
// it: it strips the prefix and decodes nothing, so the path is not escaped.
func fileURL(path string) string { return "file://" + path }

// Process identifies the cloud-hypervisor process for a later Adopt.
func (v *VM) Process() vmm.Process { return v.proc.id }
