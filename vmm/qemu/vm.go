package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
)

// VM is one QEMU process.
type VM struct {
	proc proc
	cfg  vmm.Config
	log  *slog.Logger
	qmp  *qmp
	// mem is the shared guest memory memfd, or nil when the guest's memory
	// is a private mapping of a snapshot file.
	mem *os.File
	// incoming is the snapshot a restore's VM has yet to load (Load).
	incoming *incoming

	// logStart is the size of QEMU's log (qemuLogFile, appended to by
	// every launch in the Dir) when this VM's QEMU started.
	logStart int64

	done     chan struct{}
	doneOnce sync.Once
	waitErr  error

	mu      sync.Mutex
	sess    *yamux.Session
	sessCon net.Conn
	// pad is set while the guest may be mid-frame on the channel from a
	// host end it no longer has: a hostd that died (an adopted VM), or a
	// session whose first stream got no answer (a restored guest whose
	// snapshot cut a frame of its parent's session in two swallows the
	// marker). Its next connection writes a pad before its marker
	// (resync.go). Not after a session that answered and then dropped: a
	// guest too slow to read the pad before the next Dial's deadline would
	// then never see a marker.
	pad bool
	// answered is set once a stream of the current session was answered.
	answered bool

	stopOnce sync.Once
	stopErr  error
}

var (
	_ vmm.VM           = (*VM)(nil)
	_ vmm.DiskSwitcher = (*VM)(nil)
	_ vmm.DiskReporter = (*VM)(nil)
)

// proc is QEMU's process: a child this hostd started (cmd), or one that an
// earlier hostd started and this one adopted (h, a pidfd).
type proc struct {
	id  vmm.Process
	cmd *exec.Cmd
	h   *vmm.Handle
}

func (p proc) signal(sig syscall.Signal) {
	if p.h != nil {
		_ = p.h.Signal(sig)
		return
	}
	_ = p.cmd.Process.Signal(sig)
}

// errReleased is the Wait error of a released VM.
var errReleased = errors.New("qemu: vm released to a later hostd")

func newVM(cmd *exec.Cmd, cfg vmm.Config, log *slog.Logger) *VM {
	id, _ := vmm.Identify(cmd.Process.Pid) // the child is not reaped yet
	id.PID = cmd.Process.Pid
	vm := &VM{proc: proc{id: id, cmd: cmd}, cfg: cfg, log: log.With("sandbox_id", cfg.ID, "vm_pid", cmd.Process.Pid), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		vm.finish(err)
	}()
	return vm
}

// newAdoptedVM is the VM of h, a QEMU of an earlier hostd.
func newAdoptedVM(h *vmm.Handle, cfg vmm.Config, log *slog.Logger) *VM {
	id := h.Process()
	// The hostd before may have died mid-frame: the first connection pads.
	vm := &VM{proc: proc{id: id, h: h}, cfg: cfg, log: log.With("sandbox_id", cfg.ID, "vm_pid", id.PID), done: make(chan struct{}), pad: true}
	go func() {
		<-h.Done()
		vm.finish(nil) // not our child: its exit status is init's
	}()
	return vm
}

// finish closes done, once, with the exit error.
func (vm *VM) finish(err error) {
	vm.doneOnce.Do(func() {
		vm.waitErr = err
		close(vm.done)
	})
}

// PID is QEMU's process id.
func (vm *VM) PID() int { return vm.proc.id.PID }

// Process identifies QEMU's process for a later Adopt.
func (vm *VM) Process() vmm.Process { return vm.proc.id }

// Done is closed once QEMU has exited (or the VM was released).
func (vm *VM) Done() <-chan struct{} { return vm.done }

// Wait waits for QEMU to exit.
func (vm *VM) Wait(ctx context.Context) error {
	select {
	case <-vm.done:
		return vm.waitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (vm *VM) path(name string) string { return filepath.Join(vm.cfg.Dir, name) }

// qmpReadyTimeout bounds the wait for QMP when the caller's ctx has no
// deadline of its own. A QEMU that lives is given the caller's whole time:
// ten starting at once under TCG on two cores take more than 10 s to listen.
const qmpReadyTimeout = 2 * time.Minute

// connectQMP connects to QEMU's QMP socket and waits for its greeting,
// while QEMU runs and ctx lasts. A launch binds the socket before QEMU
// starts (listenQMP), so the first try connects, and the connection waits
// in the backlog for a greeting even after QEMU is gone (the host holds the
// listening socket until the launch returns): the wait ends at QEMU's exit,
// which is the answer (exitedErr). The retries are for a socket gone.
func (vm *VM) connectQMP(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, qmpReadyTimeout)
		defer cancel()
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := vm.onExit(cancel)
	defer stop()
	for {
		q, err := dialQMP(dctx, vm.path(qmpSocket))
		if err == nil {
			vm.qmp = q
			return nil
		}
		if vm.running() != nil {
			return vm.exitedErr("start")
		}
		select {
		case <-vm.done:
			return vm.exitedErr("start")
		case <-ctx.Done():
			return fmt.Errorf("qemu: qmp not ready: %w", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// onExit calls f once QEMU has exited, unless the returned stop is called
// first.
func (vm *VM) onExit(f func()) (stop func()) {
	quit := make(chan struct{})
	go func() {
		select {
		case <-vm.done:
			f()
		case <-quit:
		}
	}()
	return func() { close(quit) }
}

// exitedErr is the error of a QEMU that exited during step: it wraps
// vmm.ErrNotRunning with QEMU's exit status. Its own words are in its log
// (qemuLog), which a failed launch or load adds.
func (vm *VM) exitedErr(step string) error {
	return fmt.Errorf("qemu: exited during %s (%v): %w", step, vm.waitErr, vmm.ErrNotRunning)
}

// qemuLogLines is how many of its last lines qemuLog gives.
const qemuLogLines = 20

// qemuLog returns the last lines that QEMU wrote to its log (its stdout
// and stderr) since this VM's launch, as an error, for failed starts.
func (vm *VM) qemuLog() error {
	b, _ := os.ReadFile(vm.path(qemuLogFile))
	if vm.logStart <= int64(len(b)) {
		b = b[vm.logStart:]
	}
	b = bytes.TrimRight(b, "\n")
	if len(b) == 0 {
		return nil
	}
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > qemuLogLines {
		lines = lines[len(lines)-qemuLogLines:]
	}
	return fmt.Errorf("qemu said: %s", bytes.Join(lines, []byte("\n")))
}

func (vm *VM) running() error {
	select {
	case <-vm.done:
		return vmm.ErrNotRunning
	default:
		return nil
	}
}

// Pause stops the vCPUs.
func (vm *VM) Pause(ctx context.Context) error { return vm.command(ctx, "stop", nil) }

// Resume restarts the vCPUs.
func (vm *VM) Resume(ctx context.Context) error { return vm.command(ctx, "cont", nil) }

func (vm *VM) command(ctx context.Context, cmd string, args any) error {
	if err := vm.running(); err != nil {
		return err
	}
	if _, err := vm.qmp.run(ctx, cmd, args); err != nil {
		if errors.Is(err, errQMPClosed) && vm.running() != nil {
			return vmm.ErrNotRunning
		}
		return err
	}
	return nil
}

// Dial opens a stream to a guest port over the multiplexed agent channel,
// (re)connecting the channel when needed. It waits for the guest to answer,
// so the first Dial after boot returns once guestinit serves.
func (vm *VM) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	if err := vm.running(); err != nil {
		return nil, err
	}
	sess, err := vm.session(ctx)
	if err != nil {
		return nil, err
	}
	st, err := sess.OpenStream()
	if err != nil {
		vm.dropSession(sess)
		return nil, fmt.Errorf("qemu: open stream: %w", err)
	}
	// A yamux stream's Close only half-closes it: the deadline is what
	// wakes a Connect that waits for a guest that does not answer.
	//
	// A guest can also wedge the session: yamux's reader holds a stream's
	// lock while it waits for the rest of a frame, and a guest that sends a
	// header and never its body leaves Connect blocked on that lock, past
	// any deadline. If Connect has not returned a moment after ctx ended,
	// the session goes, and with it the frame the reader waits for.
	connected := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = st.SetDeadline(time.Now())
		st.Close()
		select {
		case <-connected:
		case <-time.After(wedgedWait):
			vm.dropSession(sess)
		}
	})
	conn, err := channel.Connect(st, port)
	close(connected)
	if err == nil || errors.Is(err, channel.ErrRefused) {
		vm.markAnswered(sess)
	}
	if !stop() {
		st.Close()
		vm.dropUnanswered(sess) // it may never answer: the next Dial starts afresh
		return nil, ctx.Err()
	}
	if err != nil {
		st.Close()
		if vm.running() != nil {
			return nil, vmm.ErrNotRunning
		}
		if !errors.Is(err, channel.ErrRefused) {
			vm.dropSession(sess) // the session is broken; the next Dial starts afresh
		}
		return nil, err
	}
	return conn, nil
}

// wedgedWait is how long Dial waits, after its ctx ended, for a Connect
// to return before it drops the session as wedged.
const wedgedWait = time.Second

// session returns the live yamux session, connecting a new one if needed.
func (vm *VM) session(ctx context.Context) (*yamux.Session, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.sess != nil && !vm.sess.IsClosed() {
		return vm.sess, nil
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", vm.path(agentSocket))
	if err != nil {
		return nil, fmt.Errorf("qemu: dial agent socket: %w", err)
	}
	// Whatever yamux state the guest holds (a previous host, a snapshot),
	// the marker starts a fresh session.
	if err := writeReset(ctx, conn, vm.pad); err != nil {
		conn.Close()
		vm.pad = true // it may have stopped mid-pad, or mid-marker
		return nil, err
	}
	vm.pad = false
	sess, err := yamux.Client(newStallConn(conn), hostYamuxConfig())
	if err != nil {
		conn.Close()
		return nil, err
	}
	vm.sess, vm.sessCon, vm.answered = sess, conn, false
	return sess, nil
}

// markAnswered notes that the guest answered on session s.
func (vm *VM) markAnswered(s *yamux.Session) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.sess == s {
		vm.answered = true
	}
}

// dropUnanswered drops session s if the guest never answered on it.
func (vm *VM) dropUnanswered(s *yamux.Session) {
	vm.mu.Lock()
	answered := vm.sess != s || vm.answered
	vm.mu.Unlock()
	if !answered {
		vm.dropSession(s)
	}
}

func (vm *VM) dropSession(s *yamux.Session) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.sess == s {
		if !vm.answered {
			vm.pad = true // see pad
		}
		vm.sess.Close()
		vm.sessCon.Close()
		vm.sess, vm.sessCon = nil, nil
	}
}

// hostYamuxWindow is the largest stream window (guestinit's is the same):
// no data frame on the channel is longer.
const hostYamuxWindow = 4 << 20

// hostYamuxConfig is the host end's multiplexer config. It sends no
// keepalives: a paused guest cannot answer them, and the channel must
// survive a pause.
func hostYamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.MaxStreamWindowSize = hostYamuxWindow
	c.StreamOpenTimeout = 0
	c.ConnectionWriteTimeout = 30 * time.Second
	c.LogOutput = nil
	c.Logger = discardLogger{}
	return c
}

type discardLogger struct{}

func (discardLogger) Print(...any)          {}
func (discardLogger) Printf(string, ...any) {}
func (discardLogger) Println(...any)        {}

// Stop ends QEMU: QMP quit, then SIGTERM, then SIGKILL, each given a few
// seconds; when ctx ends, what is left of the graceful steps is skipped and
// SIGKILL sent at once. Stop returns once QEMU has been reaped (the wait
// after SIGKILL is bounded by killWait, not by ctx) and the VM's sockets are
// removed. Later calls return the first call's result.
func (vm *VM) Stop(ctx context.Context) error {
	vm.stopOnce.Do(func() { vm.stopErr = vm.stop(ctx) })
	return vm.stopErr
}

// Stop's step timeouts: quit's own QMP call, each graceful step's wait for
// the exit, and the wait for the reap after SIGKILL.
const (
	quitTimeout = time.Second
	stepWait    = 2 * time.Second
	killWait    = 5 * time.Second
)

func (vm *VM) stop(ctx context.Context) error {
	graceful := []func(){
		func() {
			if vm.qmp != nil {
				qctx, cancel := context.WithTimeout(ctx, quitTimeout)
				_, _ = vm.qmp.run(qctx, "quit", nil)
				cancel()
			}
		},
		func() { vm.proc.signal(syscall.SIGTERM) },
	}
	for _, step := range graceful {
		if vm.running() != nil || ctx.Err() != nil {
			break
		}
		step()
		t := time.NewTimer(stepWait)
		select {
		case <-vm.done:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	var err error
	if vm.running() == nil {
		vm.proc.signal(syscall.SIGKILL)
		t := time.NewTimer(killWait)
		select {
		case <-vm.done:
		case <-t.C:
			err = fmt.Errorf("qemu: pid %d did not exit %v after SIGKILL", vm.PID(), killWait)
		}
		t.Stop()
	}
	vm.closeConns()
	for _, f := range []string{qmpSocket, agentSocket} {
		if rerr := os.Remove(vm.path(f)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	vm.log.Info("vm stopped")
	return err
}

// closeConns closes the host's ends: the agent channel, QMP, the memfd and
// an adopted process's pidfd.
func (vm *VM) closeConns() {
	vm.mu.Lock()
	if vm.sess != nil {
		vm.sess.Close()
		vm.sessCon.Close()
		vm.sess, vm.sessCon = nil, nil
	}
	vm.mu.Unlock()
	if vm.qmp != nil {
		vm.qmp.close()
	}
	if vm.mem != nil {
		vm.mem.Close()
	}
	if vm.proc.h != nil {
		vm.proc.h.Close()
	}
}

// Release closes the host's connections to QEMU and leaves it running, for
// a later Adopt (vmm.VM). It shares Stop's once: a released VM cannot be
// stopped through this value, nor a stopped one released.
func (vm *VM) Release() error {
	vm.stopOnce.Do(func() {
		if vm.running() != nil {
			vm.closeConns()
			return
		}
		vm.finish(errReleased)
		vm.closeConns()
		vm.log.Info("vm released; it keeps running")
	})
	return nil
}

// SwitchDisk moves the running guest's disk index onto a new qcow2 overlay
// whose backing file is the current one (QMP blockdev-snapshot-sync). The
// current file is then read-only to QEMU: a frozen layer (vmm.DiskSwitcher).
func (vm *VM) SwitchDisk(ctx context.Context, index int, overlay string) error {
	return vm.command(ctx, "blockdev-snapshot-sync", map[string]any{
		"device": fmt.Sprintf("disk%d", index), "snapshot-file": inDir(vm.cfg.Dir, overlay), "format": "qcow2", "mode": "existing",
	})
}

// DiskPath is the file that disk index is on now (QMP query-block), for
// vmm.DiskReporter.
func (vm *VM) DiskPath(ctx context.Context, index int) (string, error) {
	if err := vm.running(); err != nil {
		return "", err
	}
	var blocks []struct {
		Device   string `json:"device"`
		Inserted *struct {
			File string `json:"file"`
		} `json:"inserted"`
	}
	if err := vm.qmp.query(ctx, "query-block", &blocks); err != nil {
		return "", err
	}
	want := fmt.Sprintf("disk%d", index)
	for _, b := range blocks {
		if b.Device == want && b.Inserted != nil {
			return hostPath(vm.cfg.Dir, b.Inserted.File)
		}
	}
	return "", fmt.Errorf("qemu: no disk %d", index)
}
