package channel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A file stream (a fresh stream on FilesPort) carries one whole file
// transfer as frames: a type byte, a big-endian uint32 body length, the
// body. Its bytes go straight between the file and the channel, with none
// of a ttrpc call's encoding, copies or round trip per chunk.
//
// Writing a file, host → guest:
//
//	FrameWrite (a marshaled agentv1.CreateRequest)
//	                    ← FrameOpen (empty) or FrameError
//	FrameData …, FrameEnd
//	                    ← FrameEnd (the size, 8 bytes) or FrameError
//
// The guest writes a temporary file beside the target and renames it over
// the target, fsynced, only on the host's FrameEnd: a stream that breaks
// off before it leaves the old file as it was. A host whose source fails
// sends FrameError (empty) in place of FrameEnd, and the guest answers
// FrameError once it has removed the temporary file.
//
// Reading a file, host → guest:
//
//	FrameRead (a marshaled agentv1.PathRequest)
//	                    ← FrameOpen (a marshaled agentv1.FileInfo) or FrameError
//	                    ← FrameData …, then FrameEnd or FrameError
//
// FrameError's body is a marshaled google.rpc.Status, as a ttrpc call's
// error is. Either end may close the stream to abandon the transfer.
const (
	FrameWrite byte = 'w'
	FrameRead  byte = 'r'
	FrameOpen  byte = 'o'
	FrameData  byte = 'd'
	FrameEnd   byte = 'e'
	FrameError byte = 'x'
)

// Bounds of a file stream's frames.
const (
	// FrameHeader is the length of a frame's header.
	FrameHeader = 5
	// MaxFrameData bounds a FrameData body.
	MaxFrameData = 1 << 20
	// MaxFrameMeta bounds every other frame's body.
	MaxFrameMeta = 64 << 10
)

// ErrBadFrame is returned for a frame that breaks the file stream's rules:
// an unknown or unexpected type, or a body over its bound.
var ErrBadFrame = errors.New("channel: bad file stream frame")

// PutFrameHeader writes the header of a frame of typ with an n-byte body
// into b[:FrameHeader]. A sender that reads its data into b[FrameHeader:]
// then writes header and body with one Write.
func PutFrameHeader(b []byte, typ byte, n int) {
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:FrameHeader], uint32(n))
}

// WriteFrame writes a frame of typ with body (at most MaxFrameMeta bytes)
// with one Write.
func WriteFrame(w io.Writer, typ byte, body []byte) error {
	if len(body) > MaxFrameMeta {
		return fmt.Errorf("%w: a %q frame of %d bytes", ErrBadFrame, typ, len(body))
	}
	b := make([]byte, FrameHeader+len(body))
	PutFrameHeader(b, typ, len(body))
	copy(b[FrameHeader:], body)
	_, err := w.Write(b)
	return err
}

// ReadFrameHeader reads a frame's header from r into hdr (FrameHeader
// bytes) and returns its type and body length, checked against the bound
// of its type. A frame of a type outside the protocol is ErrBadFrame.
func ReadFrameHeader(r io.Reader, hdr []byte) (typ byte, n int, err error) {
	if _, err := io.ReadFull(r, hdr[:FrameHeader]); err != nil {
		return 0, 0, err
	}
	typ, size := hdr[0], binary.BigEndian.Uint32(hdr[1:FrameHeader])
	max := uint32(MaxFrameMeta)
	switch typ {
	case FrameData:
		max = MaxFrameData
	case FrameWrite, FrameRead, FrameOpen, FrameEnd, FrameError:
	default:
		return 0, 0, fmt.Errorf("%w: type %q", ErrBadFrame, typ)
	}
	if size > max {
		return 0, 0, fmt.Errorf("%w: a %q frame of %d bytes (at most %d)", ErrBadFrame, typ, size, max)
	}
	return typ, int(size), nil
}

// ReadFrame reads a whole frame whose type must be one of want, its body
// into a fresh slice (for the small frames; data goes by ReadFrameHeader).
func ReadFrame(r io.Reader, want ...byte) (typ byte, body []byte, err error) {
	var hdr [FrameHeader]byte
	typ, n, err := ReadFrameHeader(r, hdr[:])
	if err != nil {
		return 0, nil, err
	}
	if !wanted(typ, want) {
		return 0, nil, fmt.Errorf("%w: a %q frame, expected one of %q", ErrBadFrame, typ, want)
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, fmt.Errorf("channel: read a %q frame's body: %w", typ, NoEOF(err))
	}
	return typ, body, nil
}

func wanted(typ byte, want []byte) bool {
	for _, w := range want {
		if typ == w {
			return true
		}
	}
	return false
}

// NoEOF turns an EOF inside a frame or a transfer into io.ErrUnexpectedEOF:
// only FrameEnd ends a file stream.
func NoEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
