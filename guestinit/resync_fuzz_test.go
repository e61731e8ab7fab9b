package guestinit

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/agentbox/agentbox/agent/channel"
)

// chunked returns at most n bytes per Read, so frames and markers split at
// every place the fuzzer picks.
type chunked struct {
	r io.Reader
	n int
}

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// boundaryMarker models the resync reader: it walks data's yamux frames and
// returns the offset of the first frame boundary holding the marker (-1 if
// none), how many bytes the reader passes on, and whether it stops at a
// header that is not yamux (desync). A boundary whose first byte is the
// marker's (never a yamux version) but that the end of the stream cuts short
// of a whole marker ends the stream there, as does a partial header.
func boundaryMarker(data []byte) (marker, passed int, desync bool) {
	pos := 0
	for pos < len(data) {
		if bytes.HasPrefix(data[pos:], channel.ResetMarker) {
			return pos, pos, false
		}
		if data[pos] == channel.ResetMarker[0] && len(data)-pos < len(channel.ResetMarker) {
			return -1, pos, false
		}
		if len(data)-pos < yamuxHeader {
			return -1, pos, false
		}
		if !validHeader(data[pos : pos+yamuxHeader]) {
			return -1, pos, true
		}
		next := pos + yamuxHeader
		if data[pos+1] == yamuxTypeData {
			next += int(binary.BigEndian.Uint32(data[pos+8 : pos+12]))
		}
		pos = next
	}
	return -1, len(data), false
}

func addResyncSeeds(f *testing.F) {
	payload := append([]byte("x"), channel.ResetMarker...)
	session := append(frame(yamuxTypeData, payload, uint32(len(payload))), frame(2, nil, 7)...)
	withMarker := append(append(append([]byte{}, session...), channel.ResetMarker...), "next"...)
	for _, s := range [][]byte{
		withMarker, session, channel.ResetMarker, channel.ResetMarker[:5], {0xff},
		frame(yamuxTypeData, []byte("short"), 100), frame(yamuxTypeData, nil, 0xffffffff),
		append(frame(1, nil, 0xffffffff), channel.ResetMarker...), []byte("garbage that is not yamux at all"),
		append(append(frame(yamuxTypeData, []byte("cut"), 9), bytes.Repeat([]byte{0xff}, 40)...), channel.ResetMarker...),
	} {
		f.Add(s, uint8(0), uint8(0))
		f.Add(s, uint8(3), uint8(255))
	}
}

// FuzzResyncReader feeds the guest's resync reader any byte stream, in any
// read sizes: it passes on exactly the bytes before the first marker at a
// yamux frame boundary, ends there, and keeps every byte after the marker
// for the next session.
func FuzzResyncReader(f *testing.F) {
	addResyncSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, srcChunk, readSize uint8) {
		src := chunked{r: bytes.NewReader(data), n: int(srcChunk) + 1}
		r := &resyncReader{src: src}
		var out []byte
		buf := make([]byte, int(readSize)+1)
		for {
			n, err := r.Read(buf)
			if n < 0 || n > len(buf) {
				t.Fatalf("Read returned %d for a %d-byte buffer", n, len(buf))
			}
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
		}
		marker, passed, desync := boundaryMarker(data)
		if marker >= 0 {
			if !r.done || !bytes.Equal(out, data[:marker]) {
				t.Fatalf("marker at %d: done %v, passed on %d bytes", marker, r.done, len(out))
			}
			rest, err := io.ReadAll(src)
			if err != nil {
				t.Fatal(err)
			}
			if got := append(append([]byte{}, r.rest()...), rest...); !bytes.Equal(got, data[marker+len(channel.ResetMarker):]) {
				t.Fatalf("kept %q after the marker, want %q", got, data[marker+len(channel.ResetMarker):])
			}
			return
		}
		if r.done {
			t.Fatalf("ended on a marker that is not at a frame boundary (input %q)", data)
		}
		if !bytes.Equal(out, data[:passed]) {
			t.Fatalf("passed on %d bytes, want %d of %d", len(out), passed, len(data))
		}
		if r.bad != desync {
			t.Fatalf("desync %v, want %v (input %q)", r.bad, desync, data)
		}
		if desync { // what it did not pass on is kept, for the marker scan
			rest, err := io.ReadAll(src)
			if err != nil {
				t.Fatal(err)
			}
			if got := append(r.pending(), rest...); !bytes.Equal(got, data[passed:]) {
				t.Fatalf("kept %q after the bad header, want %q", got, data[passed:])
			}
		}
	})
}

// FuzzWaitForMarker: whatever comes before the first marker is dropped,
// and every byte after it is kept, in any read sizes.
func FuzzWaitForMarker(f *testing.F) {
	addResyncSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, srcChunk, split uint8) {
		cut := min(int(split), len(data))
		pending := append([]byte{}, data[:cut]...)
		src := chunked{r: bytes.NewReader(data[cut:]), n: int(srcChunk) + 1}
		got, err := waitForMarker(src, pending)
		i := bytes.Index(data, channel.ResetMarker)
		if i < 0 {
			if err == nil {
				t.Fatalf("no marker in %q, got %q", data, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("marker at %d: %v", i, err)
		}
		rest, _ := io.ReadAll(src)
		if all := append(append([]byte{}, got...), rest...); !bytes.Equal(all, data[i+len(channel.ResetMarker):]) {
			t.Fatalf("kept %q, want %q", all, data[i+len(channel.ResetMarker):])
		}
	})
}
