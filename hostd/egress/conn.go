package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// peekTimeout bounds how long a guest may take to send its first bytes
// (TLS ClientHello or HTTP request line) on a connection that needs them.
const peekTimeout = 30 * time.Second

func (p *Proxy) acceptLoop(b *box) {
	for {
		c, err := acceptTCP(b.ls.TCP, p.log, b.id)
		if err != nil {
			return // closed by Detach
		}
		if ok, why := p.admit(b); !ok {
			refuseOver(c, why)
			continue
		}
		go func() {
			defer p.release(b)
			p.handle(b, c)
		}()
	}
}

// handle decides one guest TCP connection: by port, then by destination
// address (allow_cidrs, spliced), then by the name it carries (TLS SNI or
// HTTP Host).
func (p *Proxy) handle(b *box, c *net.TCPConn) {
	if !b.track(c) {
		_ = c.Close()
		return
	}
	defer b.untrack(c)
	defer c.Close()
	dst := origDst(c)
	pol := b.pol.Load()
	ev := Event{SandboxID: b.id, Kind: KindTCP, Host: dst.Addr().String(), Port: int(dst.Port())}
	if !pol.portAllowed(int(dst.Port())) {
		ev.Rule = "denied: port not in allow_ports"
		p.record(ev)
		refuse(c)
		return
	}
	if rule, ok := pol.cidrRule(dst.Addr()); ok && dst.Addr().Unmap() != p.answerAddr() && !neverDial(dst.Addr()) {
		ev.Allowed, ev.Rule = true, "cidr:"+rule
		up, err := p.res.dialer.Dial("tcp", dst.String())
		if err != nil {
			ev.Rule += " (upstream: " + err.Error() + ")"
			p.record(ev)
			refuse(c)
			return
		}
		ev.BytesOut, ev.BytesIn = splice(c, up)
		p.record(ev)
		return
	}
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		ev.Rule = "denied: no request within " + peekTimeout.String()
		p.record(ev)
		refuse(c)
		return
	}
	if first[0] == 0x16 { // TLS handshake record
		p.handleTLS(b, c, br, dst)
		return
	}
	p.serveHTTP(b, &prefixConn{Conn: c, r: br}, "http", "", int(dst.Port()))
}

func (p *Proxy) answerAddr() netip.Addr {
	a, _ := netip.AddrFromSlice(p.opts.AnswerAddr)
	return a.Unmap()
}

// handleTLS routes a TLS connection by its SNI: intercepted (credential
// rule), spliced (allowed), or answered with a 403 by the proxy's own
// certificate (denied; the guest trusts the CA, so it can read the reason).
func (p *Proxy) handleTLS(b *box, c *net.TCPConn, br *bufio.Reader, dst netip.AddrPort) {
	port := int(dst.Port())
	ev := Event{SandboxID: b.id, Kind: KindTLS, Host: dst.Addr().String(), Port: port}
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	hello, raw, err := peekClientHello(br)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || hello.ServerName == "" {
		ev.Rule = "denied: TLS without SNI"
		p.record(ev)
		refuse(c)
		return
	}
	host := hello.ServerName
	ev.Host = host
	replay := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(raw), br)}
	pol := b.pol.Load()
	if len(pol.injections(host)) > 0 {
		p.intercept(b, replay, host, port)
		return
	}
	rule, ok := pol.domainRule(host)
	if !ok {
		p.intercept(b, replay, host, port) // the handler answers 403
		return
	}
	ev.Allowed, ev.Rule = true, "domain:"+rule
	up, err := p.res.dial(context.Background(), host, port, pol)
	if err != nil {
		ev.Rule += " (upstream: " + err.Error() + ")"
		p.record(ev)
		refuse(c)
		return
	}
	ev.BytesOut, ev.BytesIn = splice(replay, up)
	p.record(ev)
}

// intercept terminates the guest's TLS with a certificate for host signed by
// the installation's CA and serves its HTTP requests.
func (p *Proxy) intercept(b *box, c net.Conn, host string, port int) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.opts.CA.leaf(host)
		},
	}
	tc := tls.Server(c, cfg)
	_ = c.SetDeadline(time.Now().Add(peekTimeout))
	if err := tc.Handshake(); err != nil {
		p.record(Event{SandboxID: b.id, Kind: KindHTTPS, Host: host, Port: port, Rule: "tls handshake with guest failed: " + err.Error()})
		return
	}
	_ = c.SetDeadline(time.Time{})
	p.serveHTTP(b, tc, "https", host, port)
}

// refuse resets the connection (the guest sees ECONNRESET).
func refuse(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// origDst is the destination the guest dialed, before nftables redirected
// it to the proxy; without a redirect it is the local address.
func origDst(c *net.TCPConn) netip.AddrPort {
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	rc, err := c.SyscallConn()
	if err != nil {
		return local
	}
	var out netip.AddrPort
	_ = rc.Control(func(fd uintptr) {
		mreq, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			return
		}
		m := mreq.Multiaddr
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{m[4], m[5], m[6], m[7]}), uint16(m[2])<<8|uint16(m[3]))
	})
	if !out.IsValid() {
		return local
	}
	return out
}

var errHelloRead = errors.New("egress: client hello read")

// peekClientHello reads the guest's ClientHello from r and returns it with
// the raw bytes read, to be replayed to the upstream or to a tls.Server.
func peekClientHello(r io.Reader) (*tls.ClientHelloInfo, []byte, error) {
	var buf bytes.Buffer
	var hello *tls.ClientHelloInfo
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		cp := *h
		hello = &cp
		return nil, errHelloRead
	}}
	err := tls.Server(readOnlyConn{r: io.TeeReader(r, &buf)}, cfg).Handshake()
	if hello == nil {
		return nil, nil, err
	}
	return hello, buf.Bytes(), nil
}

// readOnlyConn feeds a tls.Server bytes and swallows what it writes.
type readOnlyConn struct {
	net.Conn
	r io.Reader
}

func (c readOnlyConn) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c readOnlyConn) Write(p []byte) (int, error)        { return 0, io.ErrClosedPipe }
func (c readOnlyConn) Close() error                       { return nil }
func (c readOnlyConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c readOnlyConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c readOnlyConn) SetDeadline(t time.Time) error      { return nil }
func (c readOnlyConn) SetReadDeadline(t time.Time) error  { return nil }
func (c readOnlyConn) SetWriteDeadline(t time.Time) error { return nil }

// prefixConn reads from r (buffered or replayed bytes, then the conn).
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the underlying TCP connection.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// splice copies both ways until both directions end and returns the bytes
// sent guest→upstream and upstream→guest.
func splice(guest, up net.Conn) (out, in int64) {
	defer up.Close()
	var wg sync.WaitGroup
	var nOut, nIn atomic.Int64
	cp := func(dst, src net.Conn, n *atomic.Int64) {
		defer wg.Done()
		k, _ := io.Copy(dst, src)
		n.Store(k)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go cp(up, guest, &nOut)
	go cp(guest, up, &nIn)
	wg.Wait()
	return nOut.Load(), nIn.Load()
}
