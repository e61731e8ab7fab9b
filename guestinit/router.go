package guestinit

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/agent/channel"
)

// SerialPortName is the virtio-serial port the QEMU backend attaches.
const SerialPortName = "agentbox.0"

// YamuxConfig is the guest end's multiplexer configuration (the host's is
// vmm/qemu's hostYamuxConfig; the window is the same on both ends).
//
// It sends no keepalives, as the host's end sends none: yamux ends the
// whole session when a ping's answer takes over ConnectionWriteTimeout, and
// on a loaded machine (two cores, TCG, a guest streaming output at full
// speed) or right after a restore (a ping sent before the snapshot) it can.
// That cut every connection of the guest at once: a 200 MiB output stream
// in the soak ended with "connection closed". A write waits for the
// channel as long as the host's end lets a frame take (its frame stall),
// not yamux's 10 s, for the same reason; the host's call deadlines bound a
// guest that does not answer.
func YamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.MaxStreamWindowSize = yamuxWindow
	c.LogOutput = io.Discard
	c.StreamOpenTimeout = 10 * time.Second
	c.EnableKeepAlive = false
	c.ConnectionWriteTimeout = yamuxWriteTimeout
	return c
}

// yamuxWriteTimeout bounds how long one frame may wait to be sent.
const yamuxWriteTimeout = time.Minute

// yamuxWindow is the largest stream window, on both ends: no data frame
// of the host's is longer.
const yamuxWindow = 4 << 20

// Router delivers agent-channel connections to per-port listeners, whatever
// transport they arrive on.
type Router struct {
	log   *slog.Logger
	mu    sync.Mutex
	ports map[uint32]*portListener
}

// NewRouter returns an empty Router.
func NewRouter(log *slog.Logger) *Router {
	return &Router{log: log, ports: map[uint32]*portListener{}}
}

// Listen returns the listener for port.
func (r *Router) Listen(port uint32) net.Listener {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.ports[port]
	if !ok {
		l = &portListener{port: port, conns: make(chan net.Conn, 16), done: make(chan struct{})}
		r.ports[port] = l
	}
	return l
}

func (r *Router) lookup(port uint32) *portListener {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ports[port]
}

// ServeVsock listens on vsock for every registered port.
func (r *Router) ServeVsock() error {
	if _, err := os.Stat("/dev/vsock"); err != nil {
		return err
	}
	if _, err := vsock.ContextID(); err != nil {
		return fmt.Errorf("no vsock device: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for port, pl := range r.ports {
		l, err := vsock.Listen(port, nil)
		if err != nil {
			return fmt.Errorf("vsock listen %d: %w", port, err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					r.log.Error("vsock accept", "port", port, "err", err)
					return
				}
				pl.deliver(c)
			}
		}()
	}
	return nil
}

// ServeSerial runs yamux sessions over the virtio-serial device forever.
// Every host connection starts with channel.ResetMarker: a session ends when
// the host disconnects (reads return EOF) or when a new marker arrives at a
// frame boundary (a new host, or a guest restored from a snapshot), and the
// next session starts right after a marker.
func (r *Router) ServeSerial(dev string) {
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		r.log.Error("open serial port", "device", dev, "err", err)
		return
	}
	// Nonblocking, so reads and writes wait in Go's poller. A blocking read
	// (the channel's reader is nearly always in one) held the only P of a
	// one-vCPU guest in a syscall: every other goroutine that woke (an
	// answer to send, an exit, a signal) waited for sysmon to take the P
	// back, up to 10 ms each, and a restored guest's wake took 30-40 ms
	// longer. With the host away, reads return EOF at once either way.
	f := os.NewFile(uintptr(fd), dev)
	var start, pending []byte
	haveStart := false
	for {
		if !haveStart {
			rest, err := waitForMarker(f, pending)
			pending = nil
			if err != nil {
				time.Sleep(5 * time.Millisecond) // host not connected: reads return EOF at once
				continue
			}
			start = rest
		}
		rr := &resyncReader{src: f, buf: start}
		r.serveSession(&serialConn{r: rr, w: channel.JoinFrames(f)})
		start, haveStart, pending = rr.rest(), rr.done, rr.pending()
		if rr.bad {
			r.log.Warn("agent channel", "err", errDesync)
		}
	}
}

// serveSession runs one yamux session until it ends.
func (r *Router) serveSession(conn *serialConn) {
	sess, err := yamux.Server(conn, YamuxConfig())
	if err != nil {
		r.log.Error("yamux", "err", err)
		return
	}
	for {
		st, err := sess.Accept()
		if err != nil {
			break
		}
		go r.route(st)
	}
	sess.Close()
	r.log.Debug("agent channel session ended")
}

// route reads a stream's CONNECT line and hands it to the port's listener.
func (r *Router) route(st net.Conn) {
	port, conn, err := channel.Accept(st)
	if err != nil {
		st.Close()
		return
	}
	pl := r.lookup(port)
	if err := channel.Reply(conn, port, pl != nil); err != nil || pl == nil {
		st.Close()
		return
	}
	pl.deliver(conn)
}

// serialConn is the yamux transport over the serial device. Close leaves the
// device open for the next session.
type serialConn struct {
	r io.Reader
	w io.Writer
}

func (c *serialConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *serialConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *serialConn) Close() error                { return nil }

// portListener is a net.Listener fed by the router.
type portListener struct {
	port  uint32
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *portListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *portListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *portListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *portListener) Addr() net.Addr { return portAddr(l.port) }

type portAddr uint32

func (a portAddr) Network() string { return "agent" }
func (a portAddr) String() string  { return fmt.Sprintf("agent:%d", uint32(a)) }

// findSerialPort finds the /dev node of the virtio-serial port called name.
func findSerialPort(name string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		matches, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err == nil && strings.TrimSpace(string(b)) == name {
				dev := "/dev/" + filepath.Base(filepath.Dir(m))
				if _, err := os.Stat(dev); err == nil {
					return dev, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", errors.New("no virtio-serial port " + name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
