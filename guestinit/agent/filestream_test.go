package agent

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"google.golang.org/protobuf/proto"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/internal/waitfor"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// yamuxPair returns the two ends of one stream of a yamux session, as the
// QEMU channel carries a file stream: the host's Close only half-closes.
func yamuxPair(t *testing.T) (host, guest net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	hs, err := yamux.Client(a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := yamux.Server(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close(); gs.Close() })
	if host, err = hs.Open(); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Write(nil); err != nil { // the SYN
		t.Fatal(err)
	}
	if guest, err = gs.Accept(); err != nil {
		t.Fatal(err)
	}
	return host, guest
}

// serve runs ServeStream on guest and returns a channel closed when it
// has returned.
func serve(f *Files, guest net.Conn) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); defer guest.Close(); f.ServeStream(guest) }()
	return done
}

// returns fails the test if done is not closed within a generous bound
// (a hang guard, not a timing).
func returns(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the stream's server never returned", what)
	}
}

// TestFileStreamReadAbandoned: a host that stops reading a file and
// closes its end of the stream frees the guest's transfer at once, though
// the stream's window is full and a close is only a half-close.
func TestFileStreamReadAbandoned(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, make([]byte, 16<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	host, guest := yamuxPair(t)
	done := serve(NewFiles(), guest)
	req, _ := proto.Marshal(&agentv1.PathRequest{Path: []byte(p)})
	if err := channel.WriteFrame(host, channel.FrameRead, req); err != nil {
		t.Fatal(err)
	}
	if _, _, err := channel.ReadFrame(host, channel.FrameOpen); err != nil {
		t.Fatal(err)
	}
	waitfor.Blocked(t, "yamux.(*Stream).write") // the guest fills the window and waits
	host.Close()
	returns(t, done, "abandoned read")
}

// TestFileStreamWriteBrokenOff: a write whose stream ends before the
// host's end frame leaves the old file and no temporary file.
func TestFileStreamWriteBrokenOff(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keep")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	host, guest := yamuxPair(t)
	done := serve(NewFiles(), guest)
	req, _ := proto.Marshal(&agentv1.CreateRequest{Path: []byte(p)})
	if err := channel.WriteFrame(host, channel.FrameWrite, req); err != nil {
		t.Fatal(err)
	}
	if _, _, err := channel.ReadFrame(host, channel.FrameOpen); err != nil {
		t.Fatal(err)
	}
	if err := channel.WriteFrame(host, channel.FrameData, []byte("new")); err != nil {
		t.Fatal(err)
	}
	host.Close()
	returns(t, done, "broken-off write")
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("got %q, want the old content", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

// TestFileStreamBadFirstFrame: a stream that starts with anything but a
// read or a write is answered with an invalid-argument error.
func TestFileStreamBadFirstFrame(t *testing.T) {
	for name, first := range map[string][]byte{
		"data first":   {channel.FrameData, 0, 0, 0, 1, 'x'},
		"unknown type": {'?', 0, 0, 0, 0},
		"bad request":  {channel.FrameRead, 0, 0, 0, 2, 0xff, 0xff},
	} {
		t.Run(name, func(t *testing.T) {
			host, guest := yamuxPair(t)
			done := serve(NewFiles(), guest)
			if _, err := host.Write(first); err != nil {
				t.Fatal(err)
			}
			if typ, _, err := channel.ReadFrame(host, channel.FrameError); err != nil || typ != channel.FrameError {
				t.Errorf("answer %q, %v; want an error frame", typ, err)
			}
			host.Close()
			returns(t, done, name)
		})
	}
}
