package vmmtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/guestinit/agent"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// fakeGuest is the in-process "guest" of a FakeVM: the real guestinit
// agent's Exec and Files services and file streams, a host-safe System
// service, and the port-forward service, served over net.Pipe streams. Its gate freezes
// every stream while the VM is paused.
type fakeGuest struct {
	srv    *ttrpc.Server
	lis    *pipeListener
	gate   *gate
	procs  *groupSpawner
	system *fakeSystem
	files  *agent.Files

	wg      sync.WaitGroup // Serve and the port-forward streams
	mu      sync.Mutex
	streams map[net.Conn]bool // open port-forward conns, closed by close
	closed  bool
	// replaced are the ports whose streams a test's Agent serves instead;
	// agentConns the real agent's open streams, which a replacement cuts.
	replaced   map[uint32]Agent
	agentConns map[net.Conn]bool
}

// Agent serves the guest end of one stream in place of what guestinit
// serves on its port: a test's hostile guest (FakeVM.ReplaceAgent). It
// must return once conn is closed (the VM closes it when it ends).
type Agent func(conn net.Conn)

func newFakeGuest(hostname string, log *slog.Logger) (*fakeGuest, error) {
	srv, err := ttrpc.NewServer()
	if err != nil {
		return nil, err
	}
	g := &fakeGuest{
		srv: srv, lis: newPipeListener(), gate: newGate(), procs: newGroupSpawner(),
		system: &fakeSystem{real: agent.NewSystem(time.Now()), hostname: hostname}, streams: map[net.Conn]bool{},
		files:    agent.NewFiles(),
		replaced: map[uint32]Agent{}, agentConns: map[net.Conn]bool{},
	}
	agentv1.RegisterExecService(srv, agent.NewExec(g.procs, log))
	agentv1.RegisterFilesService(srv, g.files)
	agentv1.RegisterSystemService(srv, g.system)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		_ = srv.Serve(context.Background(), g.lis)
	}()
	return g, nil
}

// dial opens a stream to port: the agent, the port forwarder, or
// channel.ErrRefused. It gives up when ctx or stop ends.
func (g *fakeGuest) dial(ctx context.Context, port uint32, stop <-chan struct{}) (net.Conn, error) {
	if c, ok, err := g.serveReplaced(port); ok {
		return c, err
	}
	switch port {
	case channel.AgentPort:
		host, guest := net.Pipe()
		gc := &gatedConn{Conn: guest, gate: g.gate}
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return nil, errGuestClosed
		}
		g.agentConns[gc] = true // before the agent has it: a close ends it
		g.mu.Unlock()
		if err := g.lis.offer(ctx, gc, stop); err != nil {
			g.mu.Lock()
			delete(g.agentConns, gc)
			g.mu.Unlock()
			host.Close()
			guest.Close()
			return nil, err
		}
		return host, nil
	case channel.PortForwardPort, channel.FilesPort:
		host, guest := net.Pipe()
		gc := &gatedConn{Conn: guest, gate: g.gate}
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			host.Close()
			return nil, errGuestClosed
		}
		g.streams[gc] = true
		g.wg.Add(1)
		g.mu.Unlock()
		if port == channel.FilesPort {
			go g.serveFiles(gc)
		} else {
			go g.forward(gc)
		}
		return host, nil
	}
	return nil, channel.ErrRefused
}

var errGuestClosed = errors.New("vmmtest: fake guest closed")

// serveReplaced opens a stream to port that its replacement Agent serves,
// if it has one (ok). The lookup and the stream's registration are under
// one lock, so a replace that ends the agent's streams ends this one too.
func (g *fakeGuest) serveReplaced(port uint32) (conn net.Conn, ok bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.replaced[port]
	if a == nil {
		return nil, false, nil
	}
	if g.closed {
		return nil, true, errGuestClosed
	}
	host, guest := net.Pipe()
	gc := &gatedConn{Conn: guest, gate: g.gate}
	g.streams[gc] = true
	if port == channel.AgentPort {
		g.agentConns[gc] = true
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer func() {
			gc.Close()
			g.mu.Lock()
			delete(g.streams, gc)
			delete(g.agentConns, gc)
			g.mu.Unlock()
		}()
		a(gc)
	}()
	return host, true, nil
}

// replace makes a serve port's later streams (nil: what guestinit serves)
// and, for the agent's port, closes the agent's open streams (the real
// agent's or a replacement's).
func (g *fakeGuest) replace(port uint32, a Agent) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a == nil {
		delete(g.replaced, port)
	} else {
		g.replaced[port] = a
	}
	if port == channel.AgentPort {
		for c := range g.agentConns {
			c.Close()
		}
		clear(g.agentConns)
	}
}

// serveFiles serves one file stream with the real agent's Files.
func (g *fakeGuest) serveFiles(st net.Conn) {
	defer g.endStream(st)
	g.files.ServeStream(st)
}

// endStream closes a stream that dial registered and marks it done.
func (g *fakeGuest) endStream(st net.Conn) {
	st.Close()
	g.mu.Lock()
	delete(g.streams, st)
	g.mu.Unlock()
	g.wg.Done()
}

// forward serves one port-forward stream like guestinit does: it connects
// to the TCP port the header names on the host's loopback.
func (g *fakeGuest) forward(st net.Conn) {
	defer g.endStream(st)
	port, rw, err := channel.AcceptTCP(st)
	if err != nil {
		return
	}
	var d net.Dialer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	tcp, dialErr := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	cancel()
	if err := channel.ReplyTCP(rw, dialErr); err != nil || dialErr != nil {
		if tcp != nil {
			tcp.Close()
		}
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		tcp.Close()
		return
	}
	g.streams[tcp] = true
	g.mu.Unlock()
	defer func() {
		tcp.Close()
		g.mu.Lock()
		delete(g.streams, tcp)
		g.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = channel.CloseWrite(dst)
		done <- struct{}{}
	}
	go copyHalf(tcp, rw)
	go copyHalf(rw, tcp)
	<-done
	<-done
}

// beginClose ends the guest without waiting: the agent server and every
// stream close and every process the agent started is killed.
func (g *fakeGuest) beginClose() {
	g.mu.Lock()
	g.closed = true
	for c := range g.streams {
		c.Close()
	}
	// The agent's streams end with the VM too, busy or not: ttrpc's
	// Server.Close leaves a connection with a call in flight open.
	for c := range g.agentConns {
		c.Close()
	}
	g.mu.Unlock()
	g.gate.stop()
	g.lis.Close()
	_ = g.srv.Close()
	g.procs.killAll()
}

// closing reports whether beginClose was called.
func (g *fakeGuest) closing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// close ends the guest and waits for its goroutines and processes (until
// ctx ends).
func (g *fakeGuest) close(ctx context.Context) error {
	g.beginClose()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		g.procs.wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pipeListener is a net.Listener whose connections are handed to it.
type pipeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) offer(ctx context.Context, c net.Conn, stop <-chan struct{}) error {
	select {
	case l.conns <- c:
		return nil
	case <-l.done:
		return errGuestClosed
	case <-stop:
		return errGuestClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "fake-vm" }

// gate is a paused/running switch; wait blocks while paused.
type gate struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed when a pause ends
	stopped chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{stopped: make(chan struct{})} }

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused {
		g.paused, g.resumed = true, make(chan struct{})
	}
}

func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused {
		g.paused = false
		close(g.resumed)
	}
}

func (g *gate) isPaused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

func (g *gate) stop() { g.once.Do(func() { close(g.stopped) }) }

// wait returns once the gate is open or stopped, or ctx (if not nil) ends.
func (g *gate) wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		paused, ch := g.paused, g.resumed
		g.mu.Unlock()
		if !paused {
			return nil
		}
		var cdone <-chan struct{}
		if ctx != nil {
			cdone = ctx.Done()
		}
		select {
		case <-ch:
		case <-g.stopped:
			return errGuestClosed
		case <-cdone:
			return ctx.Err()
		}
	}
}

// gatedConn is the guest end of a stream: while the VM is paused the guest
// neither reads what the host sent nor writes anything, like a guest whose
// vCPUs are stopped.
type gatedConn struct {
	net.Conn
	gate *gate
}

func (c *gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	_ = c.gate.wait(nil)
	return n, err
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if err := c.gate.wait(nil); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// groupSpawner starts each command in its own process group and kills the
// groups when the fake VM ends, as a VM's end ends its guest's processes.
type groupSpawner struct {
	mu     sync.Mutex
	killed bool
	live   map[int]bool
	wg     sync.WaitGroup
}

func newGroupSpawner() *groupSpawner { return &groupSpawner{live: map[int]bool{}} }

func (s *groupSpawner) Spawn(cmd *exec.Cmd) (<-chan agent.ExitStatus, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if !cmd.SysProcAttr.Setsid {
		cmd.SysProcAttr.Setpgid = true
	}
	// The lock spans the start, so that killAll never misses a process.
	s.mu.Lock()
	if s.killed {
		s.mu.Unlock()
		return nil, errGuestClosed
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	pid := cmd.Process.Pid
	s.live[pid] = true
	s.mu.Unlock()
	ch := make(chan agent.ExitStatus, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = cmd.Wait()
		s.mu.Lock()
		delete(s.live, pid)
		s.mu.Unlock()
		ch <- agent.StatusOf(cmd.ProcessState.Sys().(syscall.WaitStatus))
	}()
	return ch, nil
}

func (s *groupSpawner) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killed = true
	for pid := range s.live {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

func (s *groupSpawner) wait() { s.wg.Wait() }

// fakeSystem is the System service of a fake guest. Health is the real
// agent's, with the VM's hostname; the calls that would change the host
// (clock, entropy, hostname, filesystem freeze) are only recorded.
type fakeSystem struct {
	real *agent.System

	mu          sync.Mutex
	hostname    string
	calls       map[string]int
	identityErr error // SetIdentity's answer (FakeDriver.RefuseIdentity)
}

func (s *fakeSystem) record(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[name]++
}

func (s *fakeSystem) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[name]
}

func (s *fakeSystem) name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hostname
}

func (s *fakeSystem) Health(ctx context.Context, e *agentv1.Empty) (*agentv1.HealthResponse, error) {
	s.record("Health")
	h, err := s.real.Health(ctx, e)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	h.Hostname = s.hostname
	s.mu.Unlock()
	return h, nil
}

func (s *fakeSystem) SetTime(context.Context, *agentv1.SetTimeRequest) (*agentv1.Empty, error) {
	s.record("SetTime")
	return &agentv1.Empty{}, nil
}

func (s *fakeSystem) Reseed(context.Context, *agentv1.ReseedRequest) (*agentv1.Empty, error) {
	s.record("Reseed")
	return &agentv1.Empty{}, nil
}

func (s *fakeSystem) SetIdentity(_ context.Context, req *agentv1.SetIdentityRequest) (*agentv1.Empty, error) {
	s.record("SetIdentity")
	if s.identityErr != nil {
		return nil, s.identityErr
	}
	if req.Hostname != "" {
		s.mu.Lock()
		s.hostname = req.Hostname
		s.mu.Unlock()
	}
	return &agentv1.Empty{}, nil
}

func (s *fakeSystem) Freeze(context.Context, *agentv1.Empty) (*agentv1.Empty, error) {
	s.record("Freeze")
	return &agentv1.Empty{}, nil
}

func (s *fakeSystem) Thaw(context.Context, *agentv1.Empty) (*agentv1.Empty, error) {
	s.record("Thaw")
	return &agentv1.Empty{}, nil
}

// hostnameOf is the hostname a guest takes from its kernel command line
// (agentbox.hostname=), else the VM's id.
func hostnameOf(cmdline, id string) string {
	for _, f := range strings.Fields(cmdline) {
		if h, ok := strings.CutPrefix(f, "agentbox.hostname="); ok && h != "" {
			return h
		}
	}
	return id
}
