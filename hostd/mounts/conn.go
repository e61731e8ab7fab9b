package mounts

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/containerd/ttrpc"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Serve serves s's mounts on conn (a stream the host opened on
// channel.MountPort) until conn breaks or ctx ends; it closes conn. ready is
// called with the guest's Ready report (mount id → error, empty when every
// mount is up) each time the guest sends one.
func (s *Set) Serve(ctx context.Context, conn net.Conn, ready func(errs map[string]string)) error {
	srv, err := ttrpc.NewServer()
	if err != nil {
		conn.Close()
		return fmt.Errorf("mounts: ttrpc server: %w", err)
	}
	agentv1.RegisterMountsService(srv, &service{set: s, sem: make(chan struct{}, concurrency), ready: ready})
	l := newOneConn(conn)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, l) }()
	select {
	case <-ctx.Done():
	case <-l.broken:
	}
	err = srv.Close() // closes the listener and the connection
	<-errc
	return err
}

// oneConn is a listener that yields one connection, then blocks until it
// is closed; broken is closed once the connection fails a read or write.
type oneConn struct {
	conns  chan net.Conn
	broken chan struct{}
	closed chan struct{}
	once   sync.Once
	bonce  sync.Once
	addr   net.Addr
}

func newOneConn(c net.Conn) *oneConn {
	l := &oneConn{conns: make(chan net.Conn, 1), broken: make(chan struct{}), closed: make(chan struct{}), addr: c.LocalAddr()}
	l.conns <- &watchedConn{Conn: newAdmitConn(c), l: l}
	return l
}

func (l *oneConn) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return l.addr }

func (l *oneConn) fail() { l.bonce.Do(func() { close(l.broken) }) }

// watchedConn reports its first failed read or write to its listener.
type watchedConn struct {
	net.Conn
	l *oneConn
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.l.fail()
	}
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.l.fail()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.l.fail()
	return c.Conn.Close()
}
