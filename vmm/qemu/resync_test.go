package qemu

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
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

// TestUnansweredSessionPadsTheNext: a restored guest whose snapshot cut a
// frame in two swallows the first connection's marker and never answers;
// that session is dropped when the Dial gives up, and the next connection
// writes the pad before its marker, which gets the guest back in step. The
// first connection of a VM this hostd started writes no pad.
func TestUnansweredSessionPadsTheNext(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, agentSocket))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	vm := &VM{cfg: vmm.Config{Dir: dir}, done: make(chan struct{}), log: slog.New(slog.DiscardHandler)}
	defer func() {
		if vm.sess != nil {
			vm.dropSession(vm.sess)
		}
	}()
	firsts := make(chan []byte, 2)
	go func() {
		for range 2 {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			// The guest reads and never answers; what came first tells
			// whether the host padded.
			b := make([]byte, 1<<20)
			n, _ := io.ReadAtLeast(c, b, len(channel.ResetMarker))
			firsts <- b[:n]
			go io.Copy(io.Discard, c)
		}
	}()
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := vm.Dial(ctx, channel.AgentPort)
		cancel()
		if err == nil {
			t.Fatalf("dial %d: a guest that never answers answered", i+1)
		}
	}
	first, second := <-firsts, <-firsts
	if !bytes.HasPrefix(first, channel.ResetMarker) {
		t.Errorf("first connection began with %x, want the marker (no pad)", first[:min(len(first), 16)])
	}
	if len(second) == 0 || second[0] != 0xff {
		t.Errorf("second connection began with %x, want the pad", second[:min(len(second), 16)])
	}
}
