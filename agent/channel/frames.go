package channel

import (
	"encoding/binary"
	"io"
)

// yamux's frame header: version (1), type (1), flags (2), stream (4),
// length (4); only data frames (type YamuxData) carry a body of that
// length.
const (
	YamuxHeader = 12
	YamuxData   = 0
)

// maxJoined is the largest body that JoinFrames copies behind its header:
// a longer one is written as it comes (the copy would cost more than the
// write it saves).
const maxJoined = 64 << 10

// JoinFrames returns a writer for a yamux session's transport that writes
// each data frame's header and body with one Write to w. yamux's send loop
// writes them with two, and over virtio-serial each write is a buffer the
// other end takes and a notification: under TCG, a guest syscall and an
// exit into QEMU each, on every call's request and answer.
//
// It relies on what yamux's single send loop does: a data header with a
// non-zero length is followed at once by that frame's body. Any other
// write passes through. The writer is not safe for concurrent use, as the
// send loop needs none.
func JoinFrames(w io.Writer) io.Writer {
	return &frameJoiner{w: w}
}

type frameJoiner struct {
	w    io.Writer
	buf  []byte // a held header, then its frame
	held bool
}

func (j *frameJoiner) Write(p []byte) (int, error) {
	if j.held {
		j.held = false
		if len(p) > maxJoined {
			if _, err := j.w.Write(j.buf[:YamuxHeader]); err != nil {
				return 0, err
			}
			return j.w.Write(p)
		}
		j.buf = append(j.buf[:YamuxHeader], p...)
		n, err := j.w.Write(j.buf)
		return max(n-YamuxHeader, 0), err
	}
	if len(p) == YamuxHeader && p[1] == YamuxData && binary.BigEndian.Uint32(p[8:]) > 0 {
		j.buf = append(j.buf[:0], p...)
		j.held = true
		return len(p), nil
	}
	return j.w.Write(p)
}
