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

// TestResyncReaderHoldsItsEnd: a reader with marked and hold closes marked
// at the marker and returns its io.EOF only once hold is closed, without
// reading past the marker meanwhile (the next session reads from there).
func TestResyncReaderHoldsItsEnd(t *testing.T) {
	first := frame(2, nil, 7)
	src := bytes.NewReader(append(append(append([]byte{}, first...), channel.ResetMarker...), "next"...))
	hold := make(chan struct{})
	r := &resyncReader{src: src, marked: make(chan struct{}), hold: hold}
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		got <- result{b, err}
	}()
	<-r.marked
	select {
	case res := <-got:
		t.Fatalf("Read returned %q, %v before hold was closed", res.b, res.err)
	default:
	}
	if rest := string(append(r.rest(), mustReadAll(t, src)...)); rest != "next" {
		t.Errorf("after the marker: %q, want the next session's bytes", rest)
	}
	close(hold)
	if res := <-got; res.err != nil || !bytes.Equal(res.b, first) {
		t.Errorf("got %q, %v; want the first session's frame, then io.EOF", res.b, res.err)
	}
}

// TestCutWriter: a cut writer refuses later writes, so a retired session's
// frames never follow the next session's.
func TestCutWriter(t *testing.T) {
	var dev bytes.Buffer
	w := &cutWriter{w: &dev}
	if _, err := w.Write([]byte("old")); err != nil {
		t.Fatal(err)
	}
	w.cut()
	if n, err := w.Write([]byte("late")); n != 0 || !errors.Is(err, errRetired) {
		t.Errorf("write after cut: %d, %v; want 0, errRetired", n, err)
	}
	if dev.String() != "old" {
		t.Errorf("device got %q, want only what came before the cut", dev.String())
	}
}
