package agentclient

import (
	"encoding/binary"
	"net"
	"sync"
)

// guardConn checks the ttrpc frames the guest sends before ttrpc reads
// them, and fails the connection on one that no agent sends: a frame over
// ttrpc's 4 MiB limit (ttrpc would read and discard it, however long), a
// frame of another type than a response or stream data, or one for a
// stream the host never opened or that was answered already (ttrpc would
// log each such frame, so a guest could flood hostd's log). It reads
// through a frame at a time, so it holds no more than one header.
//
// Every call of the agent protocol is unary: the host opens a stream with
// a request frame, and the guest's one response frame ends it.
type guardConn struct {
	net.Conn

	mu   sync.Mutex
	open map[uint32]bool // streams with a request sent and no response yet
	rd   scan            // guest → host
	wr   scan            // host → guest
	bad  error
}

func newGuardConn(c net.Conn) *guardConn { return &guardConn{Conn: c, open: map[uint32]bool{}} }

// err is the breach of bounds that closed the connection, if any.
func (g *guardConn) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bad
}

// ttrpc's frame: a header of length (4), stream id (4), type (1), flags (1).
const (
	frameHeader  = 10
	maxFrame     = 4 << 20
	typeRequest  = 1
	typeResponse = 2
	// maxOpen bounds the calls the guest leaves unanswered.
	maxOpen = 1 << 16
)

// scan follows frame boundaries in one direction of the stream.
type scan struct {
	hdr  [frameHeader]byte
	got  int
	left uint32
}

// span is how many of the next n bytes belong to the current header or
// payload, so that one read never crosses into the next frame's header.
func (s *scan) span(n int) int {
	if s.got < frameHeader {
		return min(n, frameHeader-s.got)
	}
	return int(min(uint32(n), s.left))
}

// feed consumes p, calling frame with each header it completes; frame's
// error stops it.
func (s *scan) feed(p []byte, frame func(length, id uint32, typ byte) error) error {
	for len(p) > 0 {
		if s.got < frameHeader {
			k := copy(s.hdr[s.got:], p)
			s.got += k
			p = p[k:]
			if s.got < frameHeader {
				continue
			}
			s.left = binary.BigEndian.Uint32(s.hdr[:4])
			if err := frame(s.left, binary.BigEndian.Uint32(s.hdr[4:8]), s.hdr[8]); err != nil {
				return err
			}
		} else {
			k := int(min(uint32(len(p)), s.left))
			s.left -= uint32(k)
			p = p[k:]
		}
		if s.got == frameHeader && s.left == 0 {
			s.got = 0
		}
	}
	return nil
}

func (g *guardConn) Read(p []byte) (int, error) {
	g.mu.Lock()
	if g.bad != nil {
		g.mu.Unlock()
		return 0, g.bad
	}
	n := g.rd.span(len(p))
	g.mu.Unlock()
	n, err := g.Conn.Read(p[:max(n, min(len(p), 1))])
	g.mu.Lock()
	defer g.mu.Unlock()
	if ferr := g.rd.feed(p[:n], g.reply); ferr != nil {
		g.bad = ferr
		g.Conn.Close()
		return 0, ferr
	}
	return n, err
}

// reply checks one frame header from the guest. Call with g.mu held.
func (g *guardConn) reply(length, id uint32, typ byte) error {
	switch {
	case length > maxFrame:
		return badReply("a frame of %d bytes", length)
	case typ != typeResponse:
		return badReply("a frame of type %d", typ)
	case !g.open[id]:
		return badReply("a frame for stream %d, which is not open", id)
	}
	delete(g.open, id)
	return nil
}

func (g *guardConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	err := g.wr.feed(p, func(_, id uint32, typ byte) error {
		if typ != typeRequest {
			return nil
		}
		if len(g.open) >= maxOpen {
			return badReply("%d calls unanswered", len(g.open))
		}
		g.open[id] = true
		return nil
	})
	if err != nil && g.bad == nil {
		g.bad = err
		g.Conn.Close()
	}
	g.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return g.Conn.Write(p)
}
