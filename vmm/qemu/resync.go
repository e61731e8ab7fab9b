package qemu

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
)

// padChunk and padSize make the pad a host writes before its marker when
// the guest may be in the middle of a frame that a previous connection
// began and never finished (the hostd before died mid-write): more 0xff bytes than the longest data frame
// (hostYamuxWindow). 0xff never starts a yamux header, so whatever frame
// the guest was reading ends inside the pad, its reader finds the pad out
// of step, and scans on to the marker (guestinit's resync reader).
var padChunk = bytes.Repeat([]byte{0xff}, 64<<10)

const padSize = hostYamuxWindow + 64<<10

// resetWriteTimeout bounds the pad and marker's write of one connection
// (less when the caller's ctx ends sooner): a guest that reads nothing
// must not hang the host, and the next connection, which pads again,
// starts with the port closed and opened anew in the guest.
const resetWriteTimeout = 30 * time.Second

// writeReset starts a new host connection to the agent channel: the pad,
// if asked for, then channel.ResetMarker, written within resetWriteTimeout
// and ctx's deadline. Meanwhile it reads and drops what the guest sends:
// until the guest has read the marker, that is left from an earlier
// session (a frame a dead hostd never read, a keepalive), and a guest
// blocked writing it may read nothing more, which would leave both ends
// writing. The drain ends before the marker's write returns, and the
// guest's new session sends nothing before the host opens a stream.
func writeReset(ctx context.Context, conn net.Conn, pad bool) error {
	deadline := time.Now().Add(resetWriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	defer conn.SetWriteDeadline(time.Time{})
	stop := drain(conn)
	defer stop()
	for n := 0; pad && n < padSize; n += len(padChunk) {
		if _, err := conn.Write(padChunk); err != nil {
			return fmt.Errorf("qemu: pad the agent channel: %w", err)
		}
	}
	if _, err := conn.Write(channel.ResetMarker); err != nil {
		return fmt.Errorf("qemu: reset agent channel: %w", err)
	}
	return nil
}

// drain reads and drops what conn receives until stop, which returns once
// the reading has ended (by a read deadline in the past, then cleared).
func drain(conn net.Conn) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	}()
	return func() {
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = conn.SetReadDeadline(time.Time{})
	}
}
