package guestinit

import (
	"bytes"
	"encoding/binary"
	"io"

	"github.com/agentbox/agentbox/agent/channel"
)

// yamux frame header: version(1) type(1) flags(2) stream(4) length(4).
const (
	yamuxHeader   = 12
	yamuxTypeData = 0
)

// resyncReader sits between the serial device and one yamux session. It
// follows yamux frame boundaries and ends the session (io.EOF) when the host
// sends channel.ResetMarker at a boundary, keeping what follows the marker
// for the next session.
type resyncReader struct {
	src     io.Reader
	buf     []byte // bytes read from src, not yet passed on
	scratch []byte // fill's read buffer, reused
	left    int    // payload bytes of the current frame still to pass on
	hdr     []byte // partial frame header collected so far
	done    bool   // the marker was seen
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

func (r *resyncReader) Read(p []byte) (int, error) {
	for {
		if r.done {
			return 0, io.EOF
		}
		if r.left > 0 {
			return r.payload(p)
		}
		if len(r.buf) == 0 {
			if err := r.fill(); err != nil {
				return 0, err
			}
		}
		// At a frame boundary: is it the marker?
		if len(r.hdr) == 0 && r.buf[0] == channel.ResetMarker[0] {
			for len(r.buf) < len(channel.ResetMarker) {
				if err := r.fill(); err != nil {
					return 0, err
				}
			}
			if bytes.HasPrefix(r.buf, channel.ResetMarker) {
				r.done = true
				return 0, io.EOF
			}
		}
		// Pass header bytes until the header is whole, then learn the
		// frame's payload length.
		n := copy(p, r.buf[:min(len(r.buf), yamuxHeader-len(r.hdr))])
		r.hdr = append(r.hdr, r.buf[:n]...)
		r.buf = r.buf[n:]
		if len(r.hdr) == yamuxHeader {
			if r.hdr[1] == yamuxTypeData {
				r.left = int(binary.BigEndian.Uint32(r.hdr[8:12]))
			}
			r.hdr = r.hdr[:0]
		}
		return n, nil
	}
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
