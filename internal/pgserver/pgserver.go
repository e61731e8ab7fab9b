// Package pgserver runs a real PostgreSQL server from the machine's own
// binaries (Debian's postgresql package) on a fresh data directory and a
// loopback port: the fleet's tests, its simulation and `make fleet` start
// one each. initdb refuses to run as root, so as root the server runs as the
// postgres user.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoPostgres is returned when no PostgreSQL binaries are installed.
var ErrNoPostgres = errors.New("pgserver: no PostgreSQL server binaries (install Debian's postgresql package)")

// Options configure Start.
type Options struct {
	// Dir holds the data directory and the server's log; "" is a new
	// temporary directory, removed by Remove.
	Dir string
	// Port is the loopback port; 0 picks a free one.
	Port int
	// BinDir holds initdb and postgres; "" finds the newest of
	// /usr/lib/postgresql/*/bin.
	BinDir string
	// Listen is the server's listen_addresses ("" is 127.0.0.1); a fleet
	// of hosts in network namespaces adds their bridge's address.
	Listen string
	// TrustNet, a CIDR, is let in without a password beside loopback.
	TrustNet string
}

// Server is one running (or stopped) PostgreSQL server.
type Server struct {
	dir, bin      string
	port          int
	listen, trust string
	cred          *syscall.Credential
	tempDir       bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start initialises a data directory and starts the server on it; it
// returns once the server accepts connections.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := binDir(o.BinDir)
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: o.Dir, port: o.Port, listen: o.Listen, trust: o.TrustNet}
	if s.listen == "" {
		s.listen = "127.0.0.1"
	}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "agentbox-pg-"); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		s.tempDir = true
	}
	if s.port == 0 {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
	}
	if s.cred, err = runAs(); err != nil {
		return nil, err
	}
	if err := s.initdb(ctx); err != nil {
		s.Remove()
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		s.Remove()
		return nil, err
	}
	return s, nil
}

// DSN is the server's connection string for database db ("" is postgres).
func (s *Server) DSN(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// Port is the server's loopback port.
func (s *Server) Port() int { return s.port }

// PID is the running server's process id (0 when stopped).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) initdb(ctx context.Context) error {
	if err := os.MkdirAll(s.data(), 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := s.chown(); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "initdb"), "-D", s.data(), "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb: %w: %s", err, bytes.TrimSpace(out))
	}
	if s.trust == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(s.data(), "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "host all all %s trust\n", s.trust); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// Start starts the server again after Stop (or Kill), on the same data and
// port; it returns once the server accepts connections.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("pgserver: already running")
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer logf.Close()
	// The server outlives ctx: it bounds the start, not the server's life.
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data(), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses="+s.listen, "-c", "unix_socket_directories="+s.dir,
		"-c", "fsync=off", "-c", "max_connections=400", "-c", "shared_buffers=64MB")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: start: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	return s.waitReady(ctx, done)
}

// waitReady polls the port until the server answers or exits.
func (s *Server) waitReady(ctx context.Context, done chan struct{}) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			if s.ready(ctx) {
				return nil
			}
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("pgserver: postgres exited: %s", tail(log, 2000))
		case <-ctx.Done():
			return fmt.Errorf("pgserver: waiting for postgres: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// ready asks pg_isready, which tells a server still starting from one
// that takes queries.
func (s *Server) ready(ctx context.Context) bool {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres")
	return cmd.Run() == nil
}

// Stop ends the server with a fast shutdown and waits for it.
func (s *Server) Stop() error { return s.signal(syscall.SIGINT) }

// Kill ends the server with SIGKILL (its children go with its group), as
// a crash would.
func (s *Server) Kill() error { return s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	pid := s.cmd.Process.Pid
	if sig == syscall.SIGKILL {
		_ = syscall.Kill(-pid, sig)
	} else {
		_ = s.cmd.Process.Signal(sig)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-s.done
	}
	s.cmd = nil
	return nil
}

// Remove stops the server and, if Start made it, deletes its directory.
func (s *Server) Remove() {
	_ = s.Stop()
	if s.tempDir {
		_ = os.RemoveAll(s.dir)
	}
}

func (s *Server) chown() error {
	if s.cred == nil {
		return nil
	}
	return filepath.Walk(s.dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(s.cred.Uid), int(s.cred.Gid))
	})
}

// runAs is the postgres user's credential when running as root, else nil.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root needs the postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func binDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(m, func(i, j int) bool { return version(m[i]) > version(m[j]) })
	if len(m) == 0 {
		return "", ErrNoPostgres
	}
	return filepath.Dir(m[0]), nil
}

func version(p string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
	return n
}

// freePort is a free loopback port below the kernel's ephemeral range: a
// server that Stop and Start take down and up again keeps its port, and
// an ephemeral one could meanwhile become the local end of some other
// connection (then postgres fails with "Address already in use").
func freePort() (int, error) {
	lo := ephemeralLow()
	for range 64 {
		port := 10000 + mathrand.IntN(max(lo-10000, 1))
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	if n, err := strconv.Atoi(f[0]); err == nil && n > 10001 {
		return n
	}
	return 32768
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
