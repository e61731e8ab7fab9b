package channel

import (
	"io"
	"net"
	"strings"
	"testing"
)

// endless writes bytes without a newline until the pipe closes.
func endless(c net.Conn) {
	buf := []byte(strings.Repeat("x", 4096))
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// A guest that answers a header with a line that never ends fails the
// call once the line outgrows the header's bound, instead of the host
// buffering it without end.
func TestHeaderAnswerWithoutEnd(t *testing.T) {
	for name, call := range map[string]func(net.Conn) error{
		"connect":  func(c net.Conn) error { _, err := Connect(c, 1024); return err },
		"open tcp": func(c net.Conn) error { _, err := OpenTCP(c, 80); return err },
	} {
		t.Run(name, func(t *testing.T) {
			host, guest := net.Pipe()
			defer host.Close()
			go func() {
				defer guest.Close()
				go io.Copy(io.Discard, guest)
				endless(guest)
			}()
			err := call(host)
			if err == nil || !strings.Contains(err.Error(), "longer than") {
				t.Fatalf("got %v, want a line-too-long error", err)
			}
		})
	}
}
