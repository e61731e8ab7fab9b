package watch

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Sessions attributes a process to the exec session that started it.
type Sessions interface {
	// SessionOf returns the id of the session pid belongs to, or "".
	SessionOf(pid int) string
}

// DefaultIgnore are the path prefixes whose events are dropped: kernel and
// runtime state, not the sandbox's files.
var DefaultIgnore = []string{"/proc", "/sys", "/dev", "/run"}

// Config configures a Watcher.
type Config struct {
	// Paths names one path on each filesystem to watch (the whole
	// filesystem is marked). The first must be markable; the others are
	// skipped with a warning when the kernel refuses them (e.g. tmpfs,
	// which has no file handles for FID marks on older kernels).
	Paths []string
	// IgnorePID drops the events of this process (0: none). guestinit sets
	// its own pid: the host records Files-API writes itself.
	IgnorePID int
	// Ignore are path prefixes whose events are dropped (nil: DefaultIgnore).
	Ignore []string
	// Sessions attributes events to exec sessions (nil: none are).
	Sessions Sessions
	// DpkgStatus is dpkg's status file ("": /var/lib/dpkg/status).
	DpkgStatus string
	Log        *slog.Logger
}

// Validate checks the config.
func (c *Config) Validate() error {
	if len(c.Paths) == 0 {
		return errors.New("watch: no paths to watch")
	}
	if c.Log == nil {
		return errors.New("watch: no logger")
	}
	return nil
}

// Watcher turns fanotify events into guest events in a Ring. Run drains the
// fanotify fd as events come; Flush drains it in its caller, at once. They
// take turns under drainMu, which guards the fd and all the drain state.
type Watcher struct {
	cfg     Config
	ring    *Ring
	fan     int // fanotify fd
	wake    int // eventfd that interrupts Run's poll
	res     *resolver
	created *pathSet // regular files created but not yet closed for write
	open    *pathSet // files reported modified while open, not yet closed
	det     *detector
	buf     []byte
	later   []laterEvent // events recorded at the end of the drain
	// hashBuf is describe's read buffer; sessions caches SessionOf for
	// one drain.
	hashBuf  []byte
	sessions map[int]string

	// drainMu is held by a drain (Run's or Flush's); closed says the fds
	// are closed.
	drainMu sync.Mutex
	closed  bool

	mu      sync.Mutex
	closing bool
	done    chan struct{} // closed when Run returns
}

// New opens fanotify and marks the filesystems of cfg.Paths; events queue
// from then on, and Run processes them into ring.
func New(cfg Config, ring *Ring) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Ignore == nil {
		cfg.Ignore = DefaultIgnore
	}
	if cfg.DpkgStatus == "" {
		cfg.DpkgStatus = "/var/lib/dpkg/status"
	}
	const evFlags = unix.O_RDONLY | unix.O_LARGEFILE | unix.O_CLOEXEC
	fan, err := unix.FanotifyInit(initFlags|targetFlags, evFlags)
	if errors.Is(err, unix.EINVAL) {
		fan, err = unix.FanotifyInit(initFlags, evFlags)
	}
	if err != nil {
		return nil, fmt.Errorf("fanotify_init: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fan)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	w := &Watcher{
		cfg: cfg, ring: ring, fan: fan, wake: wake, res: newResolver(),
		created: newPathSet(maxCreated), open: newPathSet(maxCreated), buf: make([]byte, 64<<10), done: make(chan struct{}),
	}
	for i, p := range cfg.Paths {
		err := w.mark(p)
		if err != nil && i == 0 {
			w.closeFDs()
			return nil, err
		}
		if err != nil {
			cfg.Log.Warn("watch: filesystem not watched", "path", p, "err", err)
		}
	}
	return w, nil
}

// mark adds a filesystem mark for the filesystem holding p.
func (w *Watcher) mark(p string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", p, err)
	}
	fsid := st.Fsid.Val
	if w.res.hasMount(fsid) {
		return nil
	}
	if err := unix.FanotifyMark(w.fan, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, markMask, unix.AT_FDCWD, p); err != nil {
		return fmt.Errorf("fanotify_mark %s: %w", p, err)
	}
	// open_by_handle_at needs a real (not O_PATH) fd on the filesystem.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	w.res.addMount(fsid, fd)
	return nil
}

// Run processes events until Close. The first drain parses the dpkg status
// file, so New stays cheap on the boot path.
func (w *Watcher) Run() {
	defer close(w.done)
	defer w.closeFDs()
	fds := []unix.PollFd{{Fd: int32(w.fan), Events: unix.POLLIN}, {Fd: int32(w.wake), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			w.cfg.Log.Error("watch: poll", "err", err)
			return
		}
		if fds[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(w.wake, b[:])
		} else {
			w.linger()
		}
		w.mu.Lock()
		closing := w.closing
		w.mu.Unlock()
		w.drainLocked()
		if closing {
			return
		}
	}
}

// lingerFor is how long the watcher lets a burst of events queue up before
// it reads them (a Flush drains them at once, itself).
const lingerFor = 25 // ms

// linger waits lingerFor, or until Close pokes. Reading events
// one by one as they come would interrupt a writing process at each file
// (a context switch per event, dear on a small or emulated CPU); after the
// wait, one read takes the whole burst, and the kernel has merged the
// events of each name (create, write, close) into one.
func (w *Watcher) linger() {
	fds := []unix.PollFd{{Fd: int32(w.wake), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, lingerFor); n > 0 {
		var b [8]byte
		_, _ = unix.Read(w.wake, b[:])
	}
}

// Flush returns once every event queued before the call is in the ring: it
// drains them itself, in the caller (or waits for the drain under way).
// Handing the drain to Run's goroutine instead cost an exec's end a wakeup
// of that goroutine and, with one vCPU, the wait until the Go scheduler
// took the P back from it as it blocked in poll again (up to a sysmon
// tick, ~5 ms per exec under TCG). It returns at once on a nil or closed
// Watcher.
func (w *Watcher) Flush() {
	if w == nil {
		return
	}
	w.drainLocked()
}

// drainLocked drains under drainMu, unless the fds are closed.
func (w *Watcher) drainLocked() {
	w.drainMu.Lock()
	defer w.drainMu.Unlock()
	if !w.closed {
		w.drain()
	}
}

// Close stops Run (if it was started, waits for it) and releases the fds.
func (w *Watcher) Close(started bool) {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	if !started {
		w.closeFDs()
		return
	}
	w.poke()
	<-w.done
}

func (w *Watcher) poke() {
	one := [8]byte{1}
	_, _ = unix.Write(w.wake, one[:])
}

func (w *Watcher) closeFDs() {
	w.drainMu.Lock()
	defer w.drainMu.Unlock()
	w.closed = true
	unix.Close(w.fan)
	unix.Close(w.wake)
	w.res.close()
}

// drain reads and handles every queued event, until the fd would block.
func (w *Watcher) drain() {
	if w.det == nil {
		w.det = newDetector(w.cfg.DpkgStatus)
	}
	defer clear(w.sessions)
	defer w.recordLater("/")
	for {
		n, err := unix.Read(w.fan, w.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				w.cfg.Log.Warn("watch: read fanotify", "err", err)
			}
			return
		}
		evs, err := parseEvents(w.buf[:n])
		if err != nil {
			w.cfg.Log.Warn("watch: parse fanotify events", "err", err)
		}
		for _, ev := range evs {
			w.handle(ev)
		}
	}
}

// handle records the file events of one raw event, then the package events
// they imply; events it returns for later go to w.later.
func (w *Watcher) handle(ev rawEvent) {
	if ev.mask&unix.FAN_Q_OVERFLOW != 0 {
		w.cfg.Log.Warn("watch: fanotify queue overflowed; file events were lost")
		w.ring.Overflowed()
		return
	}
	if w.cfg.IgnorePID != 0 && ev.pid == w.cfg.IgnorePID {
		return
	}
	now, later := w.fileEvents(ev)
	if len(now)+len(later) == 0 {
		return
	}
	execID := w.sessionOf(ev.pid)
	for _, f := range now {
		if f.Op == opDeleted && f.Dir {
			w.recordLater(f.Path) // what was deleted inside it first
		}
		w.record(ev.pid, execID, f)
	}
	for _, f := range later {
		w.later = append(w.later, laterEvent{ev.pid, execID, f})
	}
}

// laterEvent is a file event held back until the end of a drain.
type laterEvent struct {
	pid    int
	execID string
	file   *agentv1.FileEvent
}

// recordLater records the held-back events under dir ("/": all), deeper
// paths first (a directory's entries are deleted before it).
func (w *Watcher) recordLater(dir string) {
	if len(w.later) == 0 {
		return
	}
	sort.SliceStable(w.later, func(i, j int) bool {
		return strings.Count(w.later[i].file.Path, "/") > strings.Count(w.later[j].file.Path, "/")
	})
	keep := w.later[:0]
	for _, l := range w.later {
		if underAny(l.file.Path, []string{dir}) || dir == "/" {
			w.record(l.pid, l.execID, l.file)
		} else {
			keep = append(keep, l)
		}
	}
	clear(w.later[len(keep):])
	w.later = keep
}

// record adds a file event to the ring, then the package events it implies.
func (w *Watcher) record(pid int, execID string, f *agentv1.FileEvent) {
	now := time.Now().UnixNano()
	ge := &agentv1.GuestEvent{TimeUnixNano: now, ExecId: execID, Pid: int32(pid), Kind: &agentv1.GuestEvent_File{File: f}}
	w.ring.Add(ge)
	for _, p := range w.det.observe(f) {
		ge := &agentv1.GuestEvent{TimeUnixNano: now, ExecId: execID, Pid: int32(pid), Kind: &agentv1.GuestEvent_Package{Package: p}}
		w.ring.Add(ge)
	}
}

// sessionOf is Sessions.SessionOf, remembered for the rest of one drain:
// a burst of events mostly comes from one process, and the lookup reads
// /proc.
func (w *Watcher) sessionOf(pid int) string {
	if w.cfg.Sessions == nil {
		return ""
	}
	if id, ok := w.sessions[pid]; ok {
		return id
	}
	id := w.cfg.Sessions.SessionOf(pid)
	if w.sessions == nil {
		w.sessions = map[int]string{}
	}
	w.sessions[pid] = id
	return id
}
