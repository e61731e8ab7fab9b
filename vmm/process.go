package vmm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The VMM process lifetime policy, for every backend: a VMM outlives the
// hostd that started it. StartProcess is the one place that decides it.
//
// Each VMM process runs in a session (and so a process group) of its own,
// with no parent-death signal: a signal to hostd's group or terminal (^C)
// does not reach it, and hostd stopping or dying (kill -9, a crash, an
// upgrade) leaves it running. Its stdout and stderr must be files (the
// backends log to a file in the VM's directory), never pipes to hostd, which
// would break when hostd goes. A new hostd finds the VMM again by its
// Process (pid and start time, never by name) and reconnects to it with
// Driver.Adopt; hostd/sandbox.Recover does that, and reaps the VMMs that no
// sandbox owns any more.
//
// DieWithHost switches a test binary back to the old policy (Pdeathsig
// SIGKILL from one locked thread), so VMs of in-process tests never outlive
// a crashed test.
var (
	dieWithHost atomic.Bool
	spawnReqs   = make(chan spawnReq)
	spawnOnce   sync.Once
)

// DieWithHost makes every later StartProcess of this process tie the VMM
// to it: the kernel kills the VMM when this process dies. It is for test
// binaries that run VMs in-process; hostd itself never calls it.
func DieWithHost() { dieWithHost.Store(true) }

// spawnReq is a process to start on the spawner thread.
type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

// spawner starts every VMM process from one locked OS thread, which never
// exits: Pdeathsig fires when the starting thread ends, not the process.
func spawner() {
	runtime.LockOSThread()
	for r := range spawnReqs {
		r.err <- r.cmd.Start()
	}
}

// StartProcess starts cmd, a VMM process, under the lifetime policy above.
// It sets cmd.SysProcAttr's Setsid (keeping its other fields; Pdeathsig
// and Setpgid are refused, they would defeat the policy).
func StartProcess(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	a := cmd.SysProcAttr
	if a.Pdeathsig != 0 || a.Setpgid {
		return fmt.Errorf("vmm: start %s: Pdeathsig or Setpgid is not the VMM lifetime policy", cmd.Path)
	}
	for _, w := range []any{cmd.Stdout, cmd.Stderr} {
		if w != nil {
			if _, ok := w.(*os.File); !ok {
				return fmt.Errorf("vmm: start %s: stdout and stderr must be files, not pipes to hostd", cmd.Path)
			}
		}
	}
	a.Setsid = true
	if !dieWithHost.Load() {
		return cmd.Start()
	}
	return startTied(cmd)
}

// StartTiedProcess starts cmd, a short-lived helper VMM (an accelerator
// probe), tied to this process: Pdeathsig SIGKILL from one locked thread,
// in a process group of its own. Its output may go to pipes.
func StartTiedProcess(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = !cmd.SysProcAttr.Setsid
	return startTied(cmd)
}

// startTied starts cmd on the spawner thread with Pdeathsig SIGKILL.
func startTied(cmd *exec.Cmd) error {
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	spawnOnce.Do(func() { go spawner() })
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnReqs <- r
	return <-r.err
}

// Process identifies one VMM process across hostd restarts: its pid and
// its start time (in clock ticks after boot, /proc/<pid>/stat field 22),
// which together never name another process, even once the pid is reused.
type Process struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// ErrProcessGone is returned by Identify and OpenProcess when no process,
// or another one, has the pid.
var ErrProcessGone = fmt.Errorf("%w: process gone", ErrNotRunning)

// Identify returns the Process that has pid now.
func Identify(pid int) (Process, error) {
	st, err := startTime(pid)
	if err != nil {
		return Process{}, err
	}
	return Process{PID: pid, StartTime: st}, nil
}

// Alive reports whether p still runs (the same process, not a reuse of its
// pid). A zombie does not run.
func (p Process) Alive() bool {
	st, err := startTime(p.PID)
	return err == nil && st == p.StartTime
}

// startTime reads pid's start time from /proc/<pid>/stat; a zombie or a
// missing process is ErrProcessGone.
func startTime(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("%w: pid %d", ErrProcessGone, pid)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("%w: pid %d: %v", ErrProcessGone, pid, err)
	}
	// The command name (field 2) is in parentheses and may hold anything:
	// the fields after the last ')' are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("vmm: /proc/%d/stat: malformed", pid)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); start time is field 22.
	if len(f) < 20 {
		return 0, fmt.Errorf("vmm: /proc/%d/stat: malformed", pid)
	}
	if f[0][0] == 'Z' || f[0][0] == 'X' {
		return 0, fmt.Errorf("%w: pid %d is a zombie", ErrProcessGone, pid)
	}
	return strconv.ParseUint(string(f[19]), 10, 64)
}

// Handle is an open VMM process that this process did not start (a VMM of
// an earlier hostd): it is held by a pidfd, so a signal never reaches a
// later process that reuses the pid. Done closes when the process exits.
type Handle struct {
	proc Process
	f    *os.File // the pidfd, non-blocking, in the runtime's poller
	rc   syscall.RawConn
	done chan struct{}
	once sync.Once
}

// The pidfd system calls have these numbers on every architecture (they
// came after the tables were unified); package syscall does not name them.
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

// OpenProcess opens p if it still runs as the same process, else
// ErrProcessGone.
func OpenProcess(p Process) (*Handle, error) {
	if p.PID <= 0 {
		return nil, fmt.Errorf("%w: pid %d", ErrProcessGone, p.PID)
	}
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(p.PID), uintptr(syscall.O_NONBLOCK), 0)
	if errno != 0 {
		return nil, fmt.Errorf("%w: pidfd_open %d: %v", ErrProcessGone, p.PID, errno)
	}
	syscall.CloseOnExec(int(fd))
	// The pidfd names whichever process had the pid at the open: check
	// it is still p after it.
	if !p.Alive() {
		syscall.Close(int(fd))
		return nil, fmt.Errorf("%w: pid %d is another process now", ErrProcessGone, p.PID)
	}
	return watchPidfd(p, fd)
}

// watchPidfd makes the handle of p's pidfd fd and starts its watch.
func watchPidfd(p Process, fd uintptr) (*Handle, error) {
	f := os.NewFile(fd, fmt.Sprintf("pidfd:%d", p.PID))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("vmm: pidfd: %w", err)
	}
	h := &Handle{proc: p, f: f, rc: rc, done: make(chan struct{})}
	go h.watch()
	return h, nil
}

// watch closes done once the process exits (the pidfd turns readable) or
// the handle is closed. Each try asks the pidfd itself whether it is
// readable: the poller's readiness is edge-triggered, and Read resets what
// it saw before the watch began, so an exit that came between the open and
// this goroutine's first Read (a process killed at once, seen once under
// load in TestHandle) would otherwise never be seen.
func (h *Handle) watch() {
	defer close(h.done)
	if beforeWatch != nil {
		beforeWatch()
	}
	_ = h.rc.Read(pidfdReadable)
}

// beforeWatch, when set (tests), runs as a watch begins: it lets the
// poller take the pidfd's readiness first, as a busy machine may.
var beforeWatch func()

// pollfd is struct pollfd of poll(2).
type pollfd struct {
	fd             int32
	events, revent int16
}

const pollIn = 0x1 // POLLIN

// pidfdReadable polls fd without waiting: true once the process exited,
// or when the pidfd cannot be polled (nothing more to wait for).
func pidfdReadable(fd uintptr) bool {
	for {
		pfd := pollfd{fd: int32(fd), events: pollIn}
		var zero syscall.Timespec
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0:
			return true
		}
		return n > 0
	}
}

// Process is what the handle holds.
func (h *Handle) Process() Process { return h.proc }

// Done is closed once the process has exited (or the handle was closed).
func (h *Handle) Done() <-chan struct{} { return h.done }

// Signal sends sig to the process; one that exited already is not an error.
func (h *Handle) Signal(sig syscall.Signal) error {
	var errno syscall.Errno
	err := h.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(sysPidfdSendSignal, fd, uintptr(sig), 0, 0, 0, 0)
	})
	switch {
	case err != nil:
		return nil // closed
	case errno == syscall.ESRCH || errno == 0:
		return nil
	}
	return fmt.Errorf("vmm: signal pid %d: %w", h.proc.PID, errno)
}

// Close releases the pidfd (the process goes on) and waits for the
// watcher to end.
func (h *Handle) Close() {
	h.once.Do(func() { h.f.Close() })
	<-h.done
}
