package qemu

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
)

// TestWriteResetDrainsTheGuest: a guest that first writes what an earlier
// session left (here more than any buffer holds: net.Pipe holds nothing)
// and only then reads gets the pad and the marker, because the host drops
// what it sends meanwhile; without the drain both ends would block
// writing. Afterwards the host reads the connection again.
func TestWriteResetDrainsTheGuest(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	got := make(chan []byte, 1)
	opened := make(chan struct{}) // the host's first stream, in the real channel
	go func() {
		if _, err := guest.Write(make([]byte, 1<<20)); err != nil { // stale frames
			got <- nil
			return
		}
		want := padSize + len(channel.ResetMarker)
		b := make([]byte, want)
		if _, err := io.ReadFull(guest, b); err != nil {
			got <- nil
			return
		}
		got <- b
		<-opened // a new session sends nothing before the host opens a stream
		_, _ = guest.Write([]byte("new session"))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := writeReset(ctx, host, true); err != nil {
		t.Fatalf("writeReset: %v", err)
	}
	b := <-got
	close(opened)
	if len(b) == 0 || !bytes.HasSuffix(b, channel.ResetMarker) || bytes.Count(b[:padSize], []byte{0xff}) != padSize {
		t.Fatalf("the guest read %d bytes, want the %d-byte pad then the marker", len(b), padSize)
	}
	buf := make([]byte, len("new session"))
	if _, err := io.ReadFull(host, buf); err != nil || string(buf) != "new session" {
		t.Fatalf("read after the reset: %q, %v", buf, err)
	}
}
