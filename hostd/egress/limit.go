package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// DefaultMaxConns is Options.MaxConnsPerSandbox's default.
const DefaultMaxConns = 512

// warnEvery spaces the warnings about one sandbox's refused connections.
const warnEvery = time.Minute

// Each admitted connection takes two descriptors from the host's budget:
// the guest's and its upstream's.
const fdsPerConn = 2

// admit takes a slot for one more of b's connections (proxy or DNS over
// TCP), or reports why not: b holds its cap, or the host's descriptor
// budget is spent. A refusal is logged at most once a minute per sandbox.
func (p *Proxy) admit(b *box) (ok bool, why string) {
	b.mu.Lock()
	over := b.open >= p.maxConns
	if !over {
		b.open++
	}
	b.mu.Unlock()
	switch {
	case over:
		why = fmt.Sprintf("sandbox at its cap of %d concurrent connections", p.maxConns)
	case !p.opts.Budget.Acquire(fdsPerConn):
		b.mu.Lock()
		b.open--
		b.mu.Unlock()
		why = fmt.Sprintf("host at its budget of %d file descriptors", p.opts.Budget.Max())
	default:
		return true, ""
	}
	if b.warned.CompareAndSwap(false, true) {
		p.log.Warn("egress connections refused (said once a minute per sandbox)", "sandbox_id", b.id, "reason", why)
		time.AfterFunc(warnEvery, func() { b.warned.Store(false) })
	}
	return false, why
}

// release gives back a slot taken by admit.
func (p *Proxy) release(b *box) {
	b.mu.Lock()
	b.open--
	b.mu.Unlock()
	p.opts.Budget.Release(fdsPerConn)
}

// refuseOver answers a connection that admit refused, at once: a 503 that
// names the cap for plain HTTP (port 80), a reset for the rest.
func refuseOver(c *net.TCPConn, why string) {
	if origDst(c).Port() != 80 {
		refuse(c)
		return
	}
	body := "agentbox egress proxy: connection refused: " + why + "\n"
	_ = c.SetDeadline(time.Now().Add(50 * time.Millisecond))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"X-Agentbox-Egress: refused\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = c.CloseWrite()
	// Read what the guest sent (briefly), so that the close sends no
	// reset that could overtake the answer.
	var buf [4096]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			break
		}
	}
	_ = c.Close()
}

// acceptTCP accepts l's next connection. An error that the next accept may
// not meet (EMFILE, ENFILE, ECONNABORTED, ...) is retried after a pause
// that grows to a second, as net/http's Server does, never in a spin; only
// a closed listener ends it.
func acceptTCP(l *net.TCPListener, log *slog.Logger, id string) (*net.TCPConn, error) {
	var delay time.Duration
	for {
		c, err := l.AcceptTCP()
		if err == nil {
			return c, nil
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		if delay == 0 {
			delay = 5 * time.Millisecond
			log.Warn("egress accept failed; retrying", "sandbox_id", id, "err", err)
		} else {
			delay = min(2*delay, time.Second)
		}
		time.Sleep(delay)
	}
}

// dnsListener is a sandbox's DNS-over-TCP listener as the DNS server sees
// it: its connections count against the sandbox's cap and the host's
// budget, and its accept survives EMFILE (the DNS server's own loop would
// spin on it).
type dnsListener struct {
	*net.TCPListener
	p *Proxy
	b *box
}

func (l dnsListener) Accept() (net.Conn, error) {
	for {
		c, err := acceptTCP(l.TCPListener, l.p.log, l.b.id)
		if err != nil {
			return nil, err
		}
		if ok, _ := l.p.admit(l.b); !ok {
			refuse(c)
			continue
		}
		return &admittedConn{TCPConn: c, release: func() { l.p.release(l.b) }}, nil
	}
}

// admittedConn gives its slot back when it is closed.
type admittedConn struct {
	*net.TCPConn
	once    sync.Once
	release func()
}

func (c *admittedConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.release)
	return err
}
