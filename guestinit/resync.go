package guestinit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"

	"github.com/agentbox/agentbox/agent/channel"
)

// yamux frame header: version(1) type(1) flags(2) stream(4) length(4).
const (
	yamuxHeader   = 12
	yamuxTypeData = 0
	yamuxTypeMax  = 3 // data, window update, ping, go away
	yamuxFlagsMax = 0xf
)

// errDesync ends a session whose bytes from the host are no longer yamux
// frames: the rest of a frame that a host which died mid-write began, read
// as the start of the next. The guest then looks for the next marker
// anywhere in what follows (the host pads its marker after such a death).
var errDesync = errors.New("guestinit: agent channel out of step (not a yamux frame); waiting for the host's next marker")

// validHeader reports whether h could start a yamux frame the host sends:
// version 0, a known type and flags, and a data frame no longer than the
// largest window (a longer one would swallow every later marker).
func validHeader(h []byte) bool {
	if h[0] != 0 || h[1] > yamuxTypeMax || h[2] != 0 || h[3] > yamuxFlagsMax {
		return false
	}
	return h[1] != yamuxTypeData || binary.BigEndian.Uint32(h[8:12]) <= yamuxWindow
}

// resyncReader sits between the serial device and one yamux session. It
// follows yamux frame boundaries and ends the session (io.EOF) when the host
// sends channel.ResetMarker at a boundary, keeping what follows the marker
// for the next session; a header that is not yamux ends it with errDesync,
// keeping the bytes from that header on (pending).
type resyncReader struct {
	src     io.Reader
	buf     []byte // bytes read from src, not yet passed on
	scratch []byte // fill's read buffer, reused
	out     []byte // a checked header, still to pass on
	left    int    // payload bytes of the current frame still to pass on
	done    bool   // the marker was seen
	bad     bool   // a header was not yamux
}

// fill reads more of src into r.buf.
func (r *resyncReader) fill() error {
	if r.scratch == nil {
		r.scratch = make([]byte, 64<<10)
	}
	keep := r.buf
	if len(keep) > 0 {
		keep = append([]byte(nil), keep...) // it may alias scratch
	}
	n, err := r.src.Read(r.scratch)
	if n == 0 {
		if err == nil {
			err = io.ErrNoProgress
		}
		return err
	}
	if len(keep) == 0 {
		r.buf = r.scratch[:n:n]
	} else {
		r.buf = append(keep, r.scratch[:n]...)
	}
	return nil
}

// fillTo reads until r.buf holds n bytes.
func (r *resyncReader) fillTo(n int) error {
	for len(r.buf) < n {
		if err := r.fill(); err != nil {
			return err
		}
	}
	return nil
}

func (r *resyncReader) Read(p []byte) (int, error) {
	switch {
	case r.done:
		return 0, io.EOF
	case r.bad:
		return 0, errDesync
	case len(r.out) > 0:
		n := copy(p, r.out)
		r.out = r.out[n:]
		return n, nil
	case r.left > 0:
		return r.payload(p)
	}
	// At a frame boundary: the marker, or a whole header to check.
	if err := r.fillTo(1); err != nil {
		return 0, err
	}
	if r.buf[0] == channel.ResetMarker[0] {
		if err := r.fillTo(len(channel.ResetMarker)); err != nil {
			return 0, err
		}
		if bytes.HasPrefix(r.buf, channel.ResetMarker) {
			r.done = true
			return 0, io.EOF
		}
	}
	if err := r.fillTo(yamuxHeader); err != nil {
		return 0, err
	}
	h := r.buf[:yamuxHeader]
	if !validHeader(h) {
		r.bad = true
		return 0, errDesync
	}
	if h[1] == yamuxTypeData {
		r.left = int(binary.BigEndian.Uint32(h[8:12]))
	}
	r.out = append([]byte(nil), h...)
	r.buf = r.buf[yamuxHeader:]
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// payload passes on bytes of a data frame, straight from src when nothing
// is buffered.
func (r *resyncReader) payload(p []byte) (int, error) {
	if len(r.buf) > 0 {
		n := copy(p, r.buf[:min(len(r.buf), r.left)])
		r.buf, r.left = r.buf[n:], r.left-n
		return n, nil
	}
	n, err := r.src.Read(p[:min(len(p), r.left)])
	r.left -= n
	if n > 0 {
		return n, nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return 0, err
}

// pending returns what the reader holds that it did not pass on, for a
// session that did not end on a marker.
func (r *resyncReader) pending() []byte {
	if r.done {
		return nil
	}
	return append([]byte(nil), r.buf...)
}

// rest returns what the reader holds after the marker.
func (r *resyncReader) rest() []byte {
	if !r.done {
		return nil
	}
	return r.buf[len(channel.ResetMarker):]
}

// waitForMarker reads src until channel.ResetMarker and returns what follows
// it. Whatever comes before is stale (from a host that is gone).
func waitForMarker(src io.Reader, pending []byte) ([]byte, error) {
	buf := pending
	b := make([]byte, 64<<10)
	for {
		if i := bytes.Index(buf, channel.ResetMarker); i >= 0 {
			return buf[i+len(channel.ResetMarker):], nil
		}
		// Keep a tail that may hold the start of a split marker.
		if keep := len(channel.ResetMarker) - 1; len(buf) > keep {
			buf = buf[len(buf)-keep:]
		}
		n, err := src.Read(b)
		buf = append(buf, b[:n]...)
		if n == 0 && err != nil {
			return nil, err
		}
	}
}
