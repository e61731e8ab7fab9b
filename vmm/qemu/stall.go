package qemu

import (
	"encoding/binary"
	"io"
	"net"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
)

// stallConn is the host end of the agent channel, under yamux. yamux's
// reader holds a stream's lock while it waits for the rest of a frame, and
// no deadline reaches it: a guest that sends a frame's header and never its
// body (root in the guest can write anything to the channel) would wedge
// the session, and every call of the sandbox, for good. stallConn follows
// the frames it reads and fails the read when the rest of a frame does not
// come within frameStall; the session then ends, and the next Dial starts
// a fresh one. Between frames it waits without a deadline (an idle guest,
// a paused one).
type stallConn struct {
	net.Conn
	// w writes to Conn, each data frame in one write (channel.JoinFrames).
	w    io.Writer
	hdr  [channel.YamuxHeader]byte
	got  int    // header bytes of the current frame seen
	left uint32 // body bytes of the current frame still to come
	// stall overrides frameStall (tests).
	stall time.Duration
}

// frameStall is how long the rest of a started frame may take to arrive.
const frameStall = 60 * time.Second

func (c *stallConn) Read(p []byte) (int, error) {
	if c.got > 0 || c.left > 0 {
		stall := frameStall
		if c.stall > 0 {
			stall = c.stall
		}
		_ = c.Conn.SetReadDeadline(time.Now().Add(stall))
	} else {
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
	n, err := c.Conn.Read(p)
	c.feed(p[:n])
	return n, err
}

// newStallConn is stallConn over conn.
func newStallConn(conn net.Conn) *stallConn {
	return &stallConn{Conn: conn, w: channel.JoinFrames(conn)}
}

func (c *stallConn) Write(p []byte) (int, error) {
	if c.w == nil {
		return c.Conn.Write(p)
	}
	return c.w.Write(p)
}

// feed follows frame boundaries through b.
func (c *stallConn) feed(b []byte) {
	for len(b) > 0 {
		if c.left > 0 {
			k := min(uint32(len(b)), c.left)
			c.left -= k
			b = b[k:]
			continue
		}
		k := copy(c.hdr[c.got:], b)
		c.got += k
		b = b[k:]
		if c.got == channel.YamuxHeader {
			c.got = 0
			if c.hdr[1] == channel.YamuxData {
				c.left = binary.BigEndian.Uint32(c.hdr[8:12])
			}
		}
	}
}
