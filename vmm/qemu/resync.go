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

// resetWriteTimeout bounds the pad and marker's write when the caller's ctx
// has no deadline (a guest that reads nothing must not hang the host).
const resetWriteTimeout = 30 * time.Second

// writeReset starts a new host connection to the agent channel: the pad,
// if asked for, then channel.ResetMarker, written by ctx's deadline.
func writeReset(ctx context.Context, conn net.Conn, pad bool) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(resetWriteTimeout)
	}
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	defer conn.SetWriteDeadline(time.Time{})
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
