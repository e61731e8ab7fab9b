package qemu

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
)

func yamuxFrame(typ byte, length uint32, body int) []byte {
	b := make([]byte, channel.YamuxHeader+body)
	b[1] = typ
	binary.BigEndian.PutUint32(b[4:8], 1)
	binary.BigEndian.PutUint32(b[8:12], length)
	return b
}

// A guest that starts a data frame and never finishes it fails the read
// (so the session ends) instead of holding yamux's reader for good; whole
// frames, and frames without a body, pass as they are.
func TestStallConnFailsAnUnfinishedFrame(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	c := &stallConn{Conn: host, stall: 100 * time.Millisecond}
	go func() {
		guest.Write(yamuxFrame(1, 1<<20, 0))   // a window update: no body
		guest.Write(yamuxFrame(0, 3, 3))       // a whole data frame
		guest.Write(yamuxFrame(0, 16, 4)[:14]) // a header, 2 of 16 bytes
	}()
	want := 2*channel.YamuxHeader + 3 + 14
	buf := make([]byte, 64)
	got := 0
	var err error
	for err == nil {
		var n int
		n, err = c.Read(buf)
		got += n
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || got != want {
		t.Fatalf("read %d bytes, then %v; want %d, then a deadline error", got, err, want)
	}
	if c.left != 14 {
		t.Errorf("%d body bytes pending, want 14", c.left)
	}
}
