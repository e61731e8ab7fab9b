package guestinit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/agentbox/agentbox/agent/channel"
)

func frame(typ byte, payload []byte, length uint32) []byte {
	h := make([]byte, yamuxHeader)
	h[1] = typ
	binary.BigEndian.PutUint32(h[8:], length)
	return append(h, payload...)
}

// oneByte returns one byte per Read, to split frames and markers anywhere.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:1]) }

func TestResyncReader(t *testing.T) {
	// A data frame whose payload contains the marker must pass through whole.
	payload := append([]byte("x"), channel.ResetMarker...)
	first := append(frame(yamuxTypeData, payload, uint32(len(payload))), frame(2, nil, 7)...)
	next := []byte("next session")
	stream := append(append(append([]byte{}, first...), channel.ResetMarker...), next...)
	for _, tc := range []struct {
		name string
		src  io.Reader
	}{
		{"whole", bytes.NewReader(stream)},
		{"byte by byte", oneByte{bytes.NewReader(stream)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &resyncReader{src: tc.src}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, first) {
				t.Fatalf("got %q (%v), want the first session's frames", got, err)
			}
			rest := append(r.rest(), mustReadAll(t, tc.src)...)
			if !r.done || !bytes.Equal(rest, next) {
				t.Errorf("got rest %q, want %q", rest, next)
			}
		})
	}
}

func mustReadAll(t *testing.T, r io.Reader) []byte {
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWaitForMarker(t *testing.T) {
	stale := []byte("stale bytes from a host that is gone")
	in := append(append(stale, channel.ResetMarker...), "fresh"...)
	got, err := waitForMarker(oneByte{bytes.NewReader(in)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > 0 && !bytes.HasPrefix([]byte("fresh"), got) {
		t.Errorf("got %q after the marker", got)
	}
	if _, err := waitForMarker(bytes.NewReader(stale), nil); err == nil {
		t.Error("no error without a marker")
	}
}

// TestResyncAfterHostDiedMidFrame: a host that died in the middle of a
// frame (its payload, or its header) leaves the guest reading the rest of
// it from the next host. That host's pad (0xff bytes, never a yamux
// header) ends the stale frame; the reader stops out of step (errDesync)
// and the marker scan finds the new session after the pad.
func TestResyncAfterHostDiedMidFrame(t *testing.T) {
	pad := bytes.Repeat([]byte{0xff}, 300)
	next := []byte("next session")
	for name, stale := range map[string][]byte{
		"mid-payload": frame(yamuxTypeData, []byte("abc"), 200),
		"mid-header":  frame(yamuxTypeData, nil, 0)[:5],
		"huge length": frame(yamuxTypeData, nil, 0xfffffff0),
	} {
		t.Run(name, func(t *testing.T) {
			stream := append(append(append(append([]byte{}, stale...), pad...), channel.ResetMarker...), next...)
			src := oneByte{bytes.NewReader(stream)}
			r := &resyncReader{src: src}
			if _, err := io.ReadAll(r); !errors.Is(err, errDesync) {
				t.Fatalf("read the stale frame and the pad: %v, want errDesync", err)
			}
			rest, err := waitForMarker(src, r.pending())
			if err != nil {
				t.Fatal(err)
			}
			if got := append(rest, mustReadAll(t, src)...); !bytes.Equal(got, next) {
				t.Errorf("after the pad and marker: %q, want %q", got, next)
			}
		})
	}
}
