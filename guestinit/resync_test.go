package guestinit

import (
	"bytes"
	"encoding/binary"
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
