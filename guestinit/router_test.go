package guestinit

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// TestGuestYamuxLeavesLivenessToTheHost: the guest's session does not end
// itself when the host is slow to read or answer: no keepalive pings (a
// late pong ended the whole session, and every connection on it), and a
// frame may wait for the channel far longer than yamux's 10 s default. The
// config also carries a stream both ways.
func TestGuestYamuxLeavesLivenessToTheHost(t *testing.T) {
	c := YamuxConfig()
	if c.EnableKeepAlive {
		t.Error("the guest's session sends keepalives: a pong late by ConnectionWriteTimeout ends it")
	}
	if c.ConnectionWriteTimeout < time.Minute {
		t.Errorf("a frame may wait %s to be sent, want at least a minute", c.ConnectionWriteTimeout)
	}
	// And the config carries a stream both ways.
	g, h := net.Pipe()
	defer g.Close()
	defer h.Close()
	srv, err := yamux.Server(g, c)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := yamux.Client(h, YamuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	hs, err := cli.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	gs, err := srv.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := gs.Read(buf); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Read(buf); err != nil || string(buf) != "ok" {
		t.Fatalf("host read %q, %v", buf, err)
	}
	if srv.IsClosed() {
		t.Error("the guest's session closed")
	}
}
