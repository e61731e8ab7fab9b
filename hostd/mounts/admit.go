package mounts

import (
	"encoding/binary"
	"net"
	"sync"
)

// The ttrpc server starts a goroutine for each request it reads, holding
// the request's payload (up to 4 MiB), before any handler can refuse it;
// a guest that floods requests, or never reads the answers, would grow
// hostd's goroutines and heap without end. admitConn stops reading the
// guest's frames while maxPending of them wait for their answer.
//
// Every service method of the mount protocol is unary, so each frame the
// guest sends is answered by exactly one response frame: a request by its
// reply, anything else (a bad stream, an oversized or unreadable frame) by
// an error status. Counting frames read against response frames written
// is then the number of requests in hostd.

// maxPending is how many of one connection's requests hostd holds at once
// (the calls that run are bounded by concurrency).
const maxPending = 16

// ttrpc's frame header: length (4), stream id (4), type (1), flags (1).
const (
	frameHeader  = 10
	typeResponse = 2
)

// admitConn is a connection whose reads pause at a frame boundary while
// maxPending frames wait for an answer.
type admitConn struct {
	net.Conn

	mu      sync.Mutex
	cond    *sync.Cond
	pending int
	closed  bool

	rd frameScan // guest → host, read by the server
	wr frameScan // host → guest, written by the server
}

func newAdmitConn(c net.Conn) *admitConn {
	a := &admitConn{Conn: c}
	a.cond = sync.NewCond(&a.mu)
	return a
}

// frameScan follows frame boundaries in a byte stream.
type frameScan struct {
	hdr  [frameHeader]byte
	got  int    // header bytes seen of the current frame
	left uint32 // payload bytes left of the current frame
}

// next returns how many of the stream's next n bytes belong to the current
// header or payload, so that a read never crosses into the next header.
func (s *frameScan) next(n int) int {
	if s.got < frameHeader {
		return min(n, frameHeader-s.got)
	}
	return int(min(uint32(n), s.left))
}

// feed consumes p; it calls frame with each header it completes.
func (s *frameScan) feed(p []byte, frame func(hdr []byte)) {
	for len(p) > 0 {
		if s.got < frameHeader {
			k := copy(s.hdr[s.got:], p)
			s.got += k
			p = p[k:]
			if s.got == frameHeader {
				s.left = binary.BigEndian.Uint32(s.hdr[:4])
				frame(s.hdr[:])
				if s.left == 0 {
					s.got = 0
				}
			}
			continue
		}
		k := int(min(uint32(len(p)), s.left))
		s.left -= uint32(k)
		p = p[k:]
		if s.left == 0 {
			s.got = 0
		}
	}
}

// Read reads the guest's bytes, waiting at a frame boundary while too many
// frames are unanswered. It is called by the server's one receive loop.
func (a *admitConn) Read(p []byte) (int, error) {
	a.mu.Lock()
	for a.rd.got == 0 && a.pending >= maxPending && !a.closed {
		a.cond.Wait()
	}
	n := a.rd.next(len(p))
	a.mu.Unlock()
	if n == 0 {
		n = len(p)
	}
	n, err := a.Conn.Read(p[:n])
	a.mu.Lock()
	a.rd.feed(p[:n], func([]byte) { a.pending++ })
	a.mu.Unlock()
	return n, err
}

// Write writes the server's bytes; each response frame frees a slot.
func (a *admitConn) Write(p []byte) (int, error) {
	a.mu.Lock()
	a.wr.feed(p, func(hdr []byte) {
		if hdr[8] == typeResponse && a.pending > 0 {
			a.pending--
			a.cond.Broadcast()
		}
	})
	a.mu.Unlock()
	return a.Conn.Write(p)
}

// Close closes the connection and wakes a waiting Read.
func (a *admitConn) Close() error {
	a.mu.Lock()
	a.closed = true
	a.cond.Broadcast()
	a.mu.Unlock()
	return a.Conn.Close()
}
