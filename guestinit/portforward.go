package guestinit

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
)

// forwardDialTimeout bounds the dial of a guest TCP port.
const forwardDialTimeout = 5 * time.Second

// spliceBuffer is the copy buffer of each direction of a forward.
const spliceBuffer = 256 << 10

// onlyReader hides a conn's WriteTo, so that io.CopyBuffer uses its buffer.
type onlyReader struct{ io.Reader }

// ServePortForward accepts port-forward streams on l (the router's listener
// of channel.PortForwardPort) and splices each to the guest TCP port its header
// names, on loopback. It returns when l is closed.
func ServePortForward(l net.Listener, log *slog.Logger) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			if err := forward(c); err != nil {
				log.Debug("port forward", "err", err)
			}
		}()
	}
}

// forward serves one port-forward stream.
func forward(st net.Conn) error {
	port, st, err := channel.AcceptTCP(st)
	if err != nil {
		st.Close()
		return err
	}
	tcp, dialErr := dialLoopback(port)
	if err := channel.ReplyTCP(st, dialErr); err != nil || dialErr != nil {
		st.Close()
		if tcp != nil {
			tcp.Close()
		}
		return errors.Join(dialErr, err)
	}
	splice(st, tcp)
	return nil
}

// dialLoopback connects to port on 127.0.0.1, then on ::1 (servers that
// bind only the IPv6 loopback).
func dialLoopback(port int) (net.Conn, error) {
	p := strconv.Itoa(port)
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", p), forwardDialTimeout)
	if err == nil {
		return c, nil
	}
	if c6, err6 := net.DialTimeout("tcp", net.JoinHostPort("::1", p), forwardDialTimeout); err6 == nil {
		return c6, nil
	}
	return nil, err
}

// splice copies both ways, passing each end's EOF on as a half-close, and
// closes both once both directions are done.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		// Big buffers mean fewer channel frames, and fewer VM exits.
		if _, err := io.CopyBuffer(dst, onlyReader{src}, make([]byte, spliceBuffer)); err != nil {
			// A broken direction ends the other too.
			a.Close()
			b.Close()
			return
		}
		_ = channel.CloseWrite(dst)
	}
	go pipe(a, b)
	go pipe(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}
