// Package mount is guestinit's side of sandbox mounts: FUSE filesystems
// (go-fuse) whose every operation is a call of the Mounts ttrpc service
// (proto/agent/v1/mount.proto) that the host serves from the mount's source.
//
// The guest cannot dial the host, so the host opens a stream on
// channel.MountPort and the guest is the ttrpc client on it. A restore,
// fork or resume resets the agent channel: the calls in flight fail, the
// host opens a new stream, and the calls are sent again on it. The mounts
// themselves stay mounted in the guest kernel throughout; a mount whose host
// no longer serves it answers EIO.
package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/ttrpc"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Timeouts.
const (
	// opTimeout bounds one filesystem operation, including the wait for a
	// host connection after a restore.
	opTimeout = 60 * time.Second
	// helloTimeout bounds the handshake of a new host stream.
	helloTimeout = 30 * time.Second
)

// ioSize is the most bytes one FUSE read or write carries (the host's
// MaxIO): the kernel's largest request (256 pages).
const ioSize = 1 << 20

// Caching in the guest kernel (README, "Mounts"). A read-write mount keeps
// names and attributes for rwCacheTimeout, so that a READDIRPLUS listing's
// attributes serve the stats that follow it (ls -l), and reads each file
// afresh at its open; a read-only one keeps names, attributes and file
// data for roCacheTimeout. Neither caches a name's absence.
const (
	rwCacheTimeout = time.Second
	roCacheTimeout = time.Minute
)

// readAheadKB is the kernel's readahead on a mount (its bdi's
// read_ahead_kb, 128 by default): sequential reads keep this much in
// flight, in requests of up to ioSize.
const readAheadKB = 4096

// maxBackground is how many of a mount's requests the kernel keeps in
// flight in the background (readahead).
const maxBackground = 16

// Service holds the guest's mounts and the host connection that serves them.
type Service struct {
	log *slog.Logger

	mu sync.Mutex
	// cur is the current host connection (nil while there is none); next
	// is closed, and replaced, when cur changes.
	cur    agentv1.MountsService
	client *ttrpc.Client
	next   chan struct{}
	// mounts are the mounted filesystems by guest path.
	mounts map[string]*mountFS
}

// NewService returns a Service with no mounts.
func NewService(log *slog.Logger) *Service {
	return &Service{log: log, next: make(chan struct{}), mounts: map[string]*mountFS{}}
}

// Serve takes each host stream from l (the router's listener of
// channel.MountPort) as the new connection. It returns when l is closed.
func (s *Service) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go s.attach(c)
	}
}

// attach makes conn the current connection, mounts what the host lists and
// reports the outcome with Ready.
func (s *Service) attach(conn net.Conn) {
	cl := ttrpc.NewClient(conn)
	mc := agentv1.NewMountsClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	defer cancel()
	hello, err := mc.Hello(ctx, &agentv1.MountHelloRequest{})
	if err != nil {
		s.log.Warn("mount hello", "err", err)
		cl.Close()
		return
	}
	s.swap(mc, cl)
	errs := map[string]string{}
	listed := map[string]bool{}
	for _, sp := range hello.Mounts {
		listed[sp.Path] = true
		if err := s.ensure(sp); err != nil {
			errs[sp.Id] = err.Error()
			s.log.Warn("mount", "path", sp.Path, "err", err)
		}
	}
	s.mu.Lock()
	for p, m := range s.mounts {
		if !listed[p] {
			m.setID("") // the host no longer serves it: EIO
		}
	}
	s.mu.Unlock()
	if _, err := mc.Ready(ctx, &agentv1.MountReadyRequest{Errors: errs}); err != nil {
		s.log.Warn("mount ready", "err", err)
	}
}

// swap makes mc the current connection and closes the previous one.
func (s *Service) swap(mc agentv1.MountsService, cl *ttrpc.Client) {
	s.mu.Lock()
	old := s.client
	s.cur, s.client = mc, cl
	close(s.next)
	s.next = make(chan struct{})
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// drop forgets mc if it is still the current connection (it failed).
func (s *Service) drop(mc agentv1.MountsService) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == mc {
		s.cur = nil
	}
}

// current returns the current connection, waiting for one until ctx ends.
func (s *Service) current(ctx context.Context) (agentv1.MountsService, error) {
	for {
		s.mu.Lock()
		cur, next := s.cur, s.next
		s.mu.Unlock()
		if cur != nil {
			return cur, nil
		}
		select {
		case <-next:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// call runs fn on the current connection, again on the next one when the
// connection breaks under it, until it answers or the op's time is up.
//
// A signal to the calling process (FUSE_INTERRUPT cancels ctx) ends only
// the wait for a connection, with EINTR, which libc's and Go's callers
// retry. Once sent, the op runs on the host whatever the guest does, so it
// waits for the answer: an interrupted rename answered EIO, and retried,
// would find its source gone.
func (s *Service) call(ctx context.Context, fn func(ctx context.Context, c agentv1.MountsService) (int32, error)) unix.Errno {
	deadline := time.Now().Add(opTimeout)
	sent, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	for {
		c, err := s.currentBy(ctx, deadline)
		if err != nil {
			if ctx.Err() != nil {
				return unix.EINTR
			}
			return unix.EIO
		}
		errno, err := fn(sent, c)
		if err == nil {
			return unix.Errno(errno)
		}
		if sent.Err() != nil || !errors.Is(err, ttrpc.ErrClosed) {
			return unix.EIO
		}
		s.drop(c)
	}
}

// currentBy is current, waiting until ctx ends or the deadline passes.
func (s *Service) currentBy(ctx context.Context, deadline time.Time) (agentv1.MountsService, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return s.current(ctx)
}

// ensure mounts sp unless a mount is already at its path (this guest was
// restored with its mounts in place), and points the mount at sp's id.
func (s *Service) ensure(sp *agentv1.MountSpec) error {
	s.mu.Lock()
	m := s.mounts[sp.Path]
	s.mu.Unlock()
	if m != nil {
		m.setID(sp.Id)
		return nil
	}
	m = &mountFS{svc: s, id: sp.Id, readOnly: sp.ReadOnly}
	if err := os.MkdirAll(sp.Path, 0o755); err != nil {
		return err
	}
	zero, keep := time.Duration(0), rwCacheTimeout
	if sp.ReadOnly {
		keep = roCacheTimeout
	}
	opts := &fs.Options{
		EntryTimeout: &keep, AttrTimeout: &keep, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName: "agentbox", Name: "agentbox", DirectMountStrict: true, AllowOther: true,
			MaxWrite: ioSize, MaxBackground: maxBackground,
		},
	}
	opts.MountOptions.DirectMountFlags = unix.MS_NOSUID | unix.MS_NODEV
	if sp.ReadOnly {
		opts.MountOptions.DirectMountFlags |= unix.MS_RDONLY
	}
	srv, err := fs.Mount(sp.Path, &node{m: m}, opts)
	if err != nil {
		return fmt.Errorf("fuse mount %s: %w", sp.Path, err)
	}
	m.srv = srv
	if err := setReadAhead(sp.Path, readAheadKB); err != nil {
		s.log.Warn("mount readahead", "path", sp.Path, "err", err)
	}
	s.mu.Lock()
	s.mounts[sp.Path] = m
	s.mu.Unlock()
	s.log.Info("mounted", "path", sp.Path, "read_only", sp.ReadOnly)
	return nil
}

// setReadAhead sets the readahead of the filesystem mounted at dir: the
// kernel caps a FUSE mount's at its bdi's default (128 KiB) whatever the
// mount asks, and only sysfs raises it.
func setReadAhead(dir string, kb int) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(p, []byte(strconv.Itoa(kb)), 0o644)
}

// mountFS is one mounted filesystem.
type mountFS struct {
	svc *Service
	srv *fuse.Server
	// readOnly mounts keep file data cached across opens.
	readOnly bool
	mu       sync.Mutex
	id       string // the host's name for it; "" once the host no longer serves it
}

func (m *mountFS) setID(id string) {
	m.mu.Lock()
	m.id = id
	m.mu.Unlock()
}

func (m *mountFS) mountID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id
}
