package channel

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// A CONNECT is accepted with its port and answered: OK lets Connect return
// the stream, an error line is ErrRefused naming the port.
func TestHandshake(t *testing.T) {
	for _, ok := range []bool{true, false} {
		host, guest := net.Pipe()
		done := make(chan error, 1)
		go func() {
			port, c, err := Accept(guest)
			if err == nil && port != 1027 {
				err = errors.New("wrong port")
			}
			if err == nil {
				err = Reply(c, port, ok)
			}
			done <- err
		}()
		_, err := Connect(host, 1027)
		if ok && err != nil {
			t.Errorf("ok: Connect: %v", err)
		}
		if !ok && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `"ERR no listener on port 1027"`)) {
			t.Errorf("refused: Connect: %v, want ErrRefused with the guest's line", err)
		}
		host.Close() // a guest still waiting on the host fails instead of hanging
		if err := <-done; err != nil {
			t.Errorf("guest: %v", err)
		}
		guest.Close()
	}
}
