package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Limits of the Exec service.
const (
	logCapacity    = 4 << 20 // bytes of output kept per session
	maxReadBytes   = 1 << 20 // most bytes one Read returns
	maxReadWait    = 10 * time.Second
	maxSessions    = 256 // sessions kept, running or not
	drainAfterExit = 250 * time.Millisecond
)

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code   int            // exit code, or -1 when a signal ended it
	Signal syscall.Signal // the signal, or 0
}

// Spawner starts a process and reports its exit once. As PID 1, guestinit's
// reaper owns every wait; elsewhere WaitSpawner waits with cmd.Wait.
type Spawner interface {
	Spawn(cmd *exec.Cmd) (<-chan ExitStatus, error)
}

// WaitSpawner is a Spawner for processes that are not PID 1.
type WaitSpawner struct{}

// Spawn starts cmd and waits for it in a goroutine.
func (WaitSpawner) Spawn(cmd *exec.Cmd) (<-chan ExitStatus, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan ExitStatus, 1)
	go func() {
		_ = cmd.Wait()
		ch <- StatusOf(cmd.ProcessState.Sys().(syscall.WaitStatus))
	}()
	return ch, nil
}

// StatusOf converts a wait status.
func StatusOf(ws syscall.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Code: -1, Signal: ws.Signal()}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// BaseEnv is the environment every command starts from.
var BaseEnv = map[string]string{
	"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME": "/root",
	"LANG": "C.UTF-8",
	"TERM": "xterm-256color",
	"USER": "root",
}

// Exec is the Exec service.
type Exec struct {
	spawner Spawner
	log     *slog.Logger
	// beforeExit runs after a process has exited and its output is
	// drained, before the session is marked exited (see BeforeExit).
	beforeExit func()
	// eventsHead, when set, gives the guest event ring's head, stored in
	// each session at its exit (see EventsHead).
	eventsHead func() uint64
	// etc holds the passwd and group files users are resolved from.
	etc string

	cgroup cgroupDir // ExecCgroup, held open

	mu       sync.Mutex
	sessions map[string]*session
	order    []*session      // sessions, oldest start first
	starting map[string]bool // ids reserved by starts in progress
}

var _ agentv1.ExecService = (*Exec)(nil)

// ExecOption configures an Exec.
type ExecOption func(*Exec)

// BeforeExit sets a hook that runs once per session after its process has
// exited, before the exit is visible to Read or List. guestinit flushes the
// file watcher there, so that a host that sees an exit finds every file
// event of the command already recorded.
func BeforeExit(f func()) ExecOption {
	return func(e *Exec) { e.beforeExit = f }
}

// EventsHead sets where a session's exit reads the guest event ring's
// head, after BeforeExit: Summary reports it, so that a host whose reader
// is past it knows it holds every event of the command.
func EventsHead(f func() uint64) ExecOption {
	return func(e *Exec) { e.eventsHead = f }
}

// UserFiles sets the directory of the passwd and group files that a
// StartRequest's user is resolved from (default /etc).
func UserFiles(dir string) ExecOption {
	return func(e *Exec) { e.etc = dir }
}

// NewExec returns an Exec service that starts processes with sp.
func NewExec(sp Spawner, log *slog.Logger, opts ...ExecOption) *Exec {
	e := &Exec{spawner: sp, log: log, etc: "/etc", sessions: map[string]*session{}, cgroup: cgroupDir{path: ExecCgroup}}
	for _, o := range opts {
		o(e)
	}
	return e
}

// session is one process and its output.
type session struct {
	id    string
	argv  []string
	pid   int
	out   *outputLog
	stdin *os.File
	// tty is the PTY master of a terminal session (nil otherwise).
	tty     *os.File
	started time.Time

	mu     sync.Mutex
	ended  time.Time
	status ExitStatus
	// eventsHead is the event ring's head at the exit (hasHead: known).
	eventsHead uint64
	hasHead    bool
	done       chan struct{}
}

func (s *session) exited() (ExitStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status, !s.ended.IsZero()
}

// Start launches a process.
func (e *Exec) Start(ctx context.Context, req *agentv1.StartRequest) (*agentv1.StartResponse, error) {
	s, err := e.start(req)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &agentv1.StartResponse{Id: s.id, Pid: int32(s.pid)}
	if req.WaitMs > 0 && !req.Stdin && !req.Tty {
		wait := min(time.Duration(req.WaitMs)*time.Millisecond, maxReadWait)
		res := s.out.readToEnd(0, maxReadBytes, wait, ctx.Done())
		resp.Output = s.readResponse(res)
		if resp.Output.Exited && req.Summary {
			resp.Summary = s.summary()
		}
		if resp.Output.Exited && req.Forget {
			e.forget(s)
		}
	}
	return resp, nil
}

func (e *Exec) start(req *agentv1.StartRequest) (*session, error) {
	argv := req.Argv
	if req.Shell != "" {
		argv = []string{"/bin/sh", "-c", req.Shell}
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%w: empty command", errBadArgs)
	}
	id := req.Id
	if id == "" {
		id = newID()
	} else if err := checkSessionID(id); err != nil {
		return nil, err
	}
	u, err := resolveUser(req.User, e.etc)
	if err != nil {
		return nil, err
	}
	cmd, err := buildCmd(argv, req.Env, req.Cwd)
	if err != nil {
		return nil, err
	}
	s := &session{id: id, argv: argv, out: newOutputLog(logCapacity), started: time.Now(), done: make(chan struct{})}
	var pipes *pipeSet
	if req.Tty {
		pipes, err = attachPTY(cmd, s, req.Rows, req.Cols)
	} else {
		pipes, err = attachPipes(cmd, s, req.Stdin)
	}
	if err != nil {
		return nil, err
	}
	applyUser(cmd, u, req.Env, req.Cwd != "")
	if !e.reserve(id) {
		pipes.closeChildEnds()
		pipes.closeParentEnds()
		return nil, fmt.Errorf("%w: session %q exists", errBadArgs, id)
	}
	cmd, exit, err := e.spawnInCgroup(cmd)
	pipes.closeChildEnds()
	if err != nil {
		pipes.closeParentEnds()
		e.unreserve(id)
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	s.pid = cmd.Process.Pid
	e.add(s)
	e.log.Debug("exec started", "exec_id", s.id, "pid", s.pid, "argv0", argv[0])
	go e.watch(s, exit, pipes)
	return s, nil
}

func buildCmd(argv []string, env map[string]string, cwd string) (*exec.Cmd, error) {
	merged := map[string]string{}
	for k, v := range BaseEnv {
		merged[k] = v
	}
	for k, v := range env {
		merged[k] = v
	}
	path := argv[0]
	if !containsSlash(path) {
		lp, err := lookPath(path, merged["PATH"])
		if err != nil {
			return nil, err
		}
		path = lp
	}
	cmd := &exec.Cmd{Path: path, Args: argv}
	for k, v := range merged {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	sort.Strings(cmd.Env)
	cmd.Dir = cwd
	if cwd != "" {
		// A child that cannot chdir fails as if argv[0] could not run
		// ("fork/exec /usr/bin/sh: no such file or directory"), so the
		// cwd is checked first and blamed by name.
		if fi, err := os.Stat(cwd); err != nil {
			return nil, fmt.Errorf("cwd %s: %w", cwd, errors.Unwrap(err))
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("cwd %s: %w", cwd, syscall.ENOTDIR)
		}
	}
	if cwd == "" {
		cmd.Dir = BaseEnv["HOME"]
		if _, err := os.Stat(cmd.Dir); err != nil {
			cmd.Dir = "/"
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

func containsSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}

// lookPath finds file in the given PATH (not the agent's own).
func lookPath(file, pathEnv string) (string, error) {
	for _, dir := range splitList(pathEnv) {
		p := dir + "/" + file
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

func splitList(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ':' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// pipeSet holds a process's pipes.
type pipeSet struct {
	child  []*os.File // ends the child owns
	stdout *os.File
	stderr *os.File
}

func attachPipes(cmd *exec.Cmd, s *session, withStdin bool) (*pipeSet, error) {
	p := &pipeSet{}
	var err error
	var w *os.File
	if p.stdout, w, err = pipe(true); err != nil {
		return nil, err
	}
	cmd.Stdout, p.child = w, append(p.child, w)
	if p.stderr, w, err = pipe(true); err != nil {
		p.closeChildEnds()
		p.closeParentEnds()
		return nil, err
	}
	cmd.Stderr, p.child = w, append(p.child, w)
	if !withStdin {
		if null := devNull(); null != nil {
			cmd.Stdin = null
		}
		return p, nil
	}
	w, r, err := pipe(false)
	if err != nil {
		p.closeChildEnds()
		p.closeParentEnds()
		return nil, err
	}
	cmd.Stdin, p.child, s.stdin = r, append(p.child, r), w
	return p, nil
}

// pipe returns a pipe whose parent end is in Go's poller (nonblocking) and
// whose child end is a plain blocking file. os.Pipe puts both ends in the
// poller, and starting the command takes the child's out again: six
// syscalls a pipe that do nothing, and under TCG each is the guest's CPU.
// The parent reads when parentReads, else it writes.
func pipe(parentReads bool) (parent, child *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	par, ch := p[0], p[1]
	if !parentReads {
		par, ch = ch, par
	}
	// A fresh pipe has no other status flags: one F_SETFL, not
	// SetNonblock's read and write of them.
	if _, err := unix.FcntlInt(uintptr(par), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(par)
		unix.Close(ch)
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(par), "|parent"), os.NewFile(uintptr(ch), "|child"), nil
}

// devNull is /dev/null, opened once, as the stdin of commands that have
// none (os/exec would open it for each), or nil when it cannot be opened.
var devNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
})

func (p *pipeSet) closeChildEnds() {
	for _, f := range p.child {
		f.Close()
	}
	p.child = nil
}

func (p *pipeSet) closeParentEnds() {
	for _, f := range []*os.File{p.stdout, p.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// awaitDrained waits, after the process has exited, for its output to be
// read. A child of the process may hold the pipes open: once nothing is left
// unread in them after drainAfterExit (or after maxDrainWaits of them), the
// reading stops. Output still in a pipe when a loaded machine has not run
// the pumps yet is waited for, not dropped.
func (p *pipeSet) awaitDrained(drained <-chan struct{}) {
	t := time.NewTimer(drainAfterExit)
	defer t.Stop()
	for waits := 1; ; waits++ {
		select {
		case <-drained:
			return
		case <-t.C:
		}
		if waits >= maxDrainWaits || !p.buffered() {
			p.closeParentEnds()
			<-drained
			return
		}
		t.Reset(drainAfterExit)
	}
}

// maxDrainWaits bounds awaitDrained (to 5 s) for a child that keeps writing.
const maxDrainWaits = 20

// buffered reports whether the parent ends hold output not yet read.
func (p *pipeSet) buffered() bool {
	for _, f := range []*os.File{p.stdout, p.stderr} {
		if f == nil {
			continue
		}
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		n := 0
		_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }) // FIONREAD: pipes and PTYs
		if n > 0 {
			return true
		}
	}
	return false
}

// watch pumps output until the process has exited and its pipes are drained.
func (e *Exec) watch(s *session, exit <-chan ExitStatus, p *pipeSet) {
	var pumps sync.WaitGroup
	pumps.Add(1)
	go pump(&pumps, p.stdout, s.out, agentv1.OutputKind_OUTPUT_KIND_STDOUT)
	if p.stderr != nil { // a PTY session has one output stream
		pumps.Add(1)
		go pump(&pumps, p.stderr, s.out, agentv1.OutputKind_OUTPUT_KIND_STDERR)
	}
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()

	st := <-exit
	p.awaitDrained(drained)
	p.closeParentEnds()
	if s.stdin != nil {
		s.stdin.Close()
	}
	if e.beforeExit != nil {
		e.beforeExit()
	}
	var head uint64
	if e.eventsHead != nil {
		head = e.eventsHead()
	}
	s.mu.Lock()
	s.status, s.ended = st, time.Now()
	s.eventsHead, s.hasHead = head, e.eventsHead != nil
	s.mu.Unlock()
	s.out.close()
	close(s.done)
	e.log.Debug("exec exited", "exec_id", s.id, "pid", s.pid, "exit_code", st.Code, "signal", int(st.Signal))
}

// pumpBufs are pump's read buffers: a command that writes nothing (or
// little) costs no 32 KiB allocation per stream, and a session's log holds
// only the bytes it was given.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func pump(wg *sync.WaitGroup, r io.Reader, out *outputLog, kind agentv1.OutputKind) {
	defer wg.Done()
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	for {
		n, err := r.Read(*bp)
		if n > 0 {
			out.append(kind, bytes.Clone((*bp)[:n]))
		}
		if err != nil {
			return
		}
	}
}

// reserve claims session id for a start in progress (false: in use).
func (e *Exec) reserve(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.sessions[id]; ok || e.starting[id] {
		return false
	}
	if e.starting == nil {
		e.starting = map[string]bool{}
	}
	e.starting[id] = true
	return true
}

func (e *Exec) unreserve(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.starting, id)
}

// checkSessionID checks a session id the host chose: up to 64 letters,
// digits, '-' or '_'.
func checkSessionID(id string) error {
	ok := len(id) <= 64
	for _, r := range id {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}
	if !ok {
		return fmt.Errorf("%w: bad session id %q", errBadArgs, id)
	}
	return nil
}

func (e *Exec) add(s *session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.starting, s.id)
	e.sessions[s.id] = s
	e.order = append(e.order, s)
	if len(e.sessions) <= maxSessions {
		return
	}
	// Forget the oldest finished session. The scan stops at the first one
	// (usually the oldest of all), so an exec costs O(running sessions),
	// not O(maxSessions): under TCG each step is the guest's CPU.
	for i, o := range e.order {
		if _, ok := o.exited(); ok {
			delete(e.sessions, o.id)
			e.order = slices.Delete(e.order, i, i+1)
			return
		}
	}
}

// forget drops finished session s, as if evicted.
func (e *Exec) forget(s *session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sessions[s.id] != s {
		return
	}
	delete(e.sessions, s.id)
	if i := slices.Index(e.order, s); i >= 0 {
		e.order = slices.Delete(e.order, i, i+1)
	}
}

func (e *Exec) get(id string) (*session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", errNoSession, id)
	}
	return s, nil
}

// Read returns output from an offset.
func (e *Exec) Read(ctx context.Context, req *agentv1.ReadOutputRequest) (*agentv1.ReadOutputResponse, error) {
	s, err := e.get(req.Id)
	if err != nil {
		return nil, toStatus(err)
	}
	max := int(req.MaxBytes)
	if max <= 0 || max > maxReadBytes {
		max = maxReadBytes
	}
	return s.readOutput(ctx, req.Offset, max, time.Duration(req.WaitMs)*time.Millisecond), nil
}

// readOutput reads up to max bytes of s's output from offset, waiting up to
// wait (at most maxReadWait) for some, or for the exit.
func (s *session) readOutput(ctx context.Context, offset uint64, max int, wait time.Duration) *agentv1.ReadOutputResponse {
	return s.readResponse(s.out.read(offset, max, min(wait, maxReadWait), ctx.Done()))
}

func (s *session) readResponse(res readResult) *agentv1.ReadOutputResponse {
	resp := &agentv1.ReadOutputResponse{Chunks: res.chunks, NextOffset: res.next, Lost: res.lost}
	if res.eof {
		st, _ := s.exited()
		resp.Exited, resp.ExitCode, resp.Signal = true, int32(st.Code), signalName(st.Signal)
	}
	return resp
}

// WriteStdin writes to or closes a process's stdin.
func (e *Exec) WriteStdin(ctx context.Context, req *agentv1.WriteStdinRequest) (*agentv1.Empty, error) {
	s, err := e.get(req.Id)
	if err != nil {
		return nil, toStatus(err)
	}
	if s.stdin == nil {
		return nil, toStatus(fmt.Errorf("%w: session %s has no stdin", errBadArgs, req.Id))
	}
	if len(req.Data) > 0 {
		if _, err := s.stdin.Write(req.Data); err != nil {
			return nil, toStatus(err)
		}
	}
	if req.Close && s.tty != nil {
		if _, err := s.tty.Write([]byte{eot}); err != nil {
			return nil, toStatus(err)
		}
	} else if req.Close {
		if err := s.stdin.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			return nil, toStatus(err)
		}
	}
	return &agentv1.Empty{}, nil
}

// Signal delivers a signal to a process's group.
func (e *Exec) Signal(ctx context.Context, req *agentv1.SignalRequest) (*agentv1.Empty, error) {
	s, err := e.get(req.Id)
	if err != nil {
		return nil, toStatus(err)
	}
	if _, done := s.exited(); done {
		return &agentv1.Empty{}, nil
	}
	sig := syscall.Signal(req.Signal)
	if err := syscall.Kill(-s.pid, sig); err != nil {
		if err := syscall.Kill(s.pid, sig); err != nil {
			return nil, toStatus(err)
		}
	}
	return &agentv1.Empty{}, nil
}

// List describes the sessions.
func (e *Exec) List(ctx context.Context, _ *agentv1.Empty) (*agentv1.ListSessionsResponse, error) {
	e.mu.Lock()
	all := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		all = append(all, s)
	}
	e.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].started.Before(all[j].started) })
	resp := &agentv1.ListSessionsResponse{}
	for _, s := range all {
		st, done := s.exited()
		out := &agentv1.Session{Id: s.id, Argv: s.argv, Pid: int32(s.pid), Running: !done, StartedUnixNano: s.started.UnixNano(), Tty: s.tty != nil}
		if done {
			s.mu.Lock()
			out.EndedUnixNano = s.ended.UnixNano()
			s.mu.Unlock()
			out.ExitCode, out.Signal = int32(st.Code), signalName(st.Signal)
		}
		resp.Sessions = append(resp.Sessions, out)
	}
	return resp, nil
}

func signalName(s syscall.Signal) string {
	if s == 0 {
		return ""
	}
	return unixSignalName(s)
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
