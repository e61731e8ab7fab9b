package channel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
)

func TestPortForwardHeader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dialErr error
	}{{"ok", nil}, {"refused", errors.New("dial tcp 127.0.0.1:81: connect: connection refused\nmore")}} {
		t.Run(tc.name, func(t *testing.T) {
			host, guest := net.Pipe()
			defer host.Close()
			errc := make(chan error, 1)
			go func() {
				port, c, err := AcceptTCP(guest)
				if err == nil && port != 8080 {
					err = fmt.Errorf("got port %d, want 8080", port)
				}
				if err == nil {
					err = ReplyTCP(c, tc.dialErr)
				}
				if err == nil && tc.dialErr == nil {
					_, err = io.WriteString(c, "payload")
				}
				guest.Close()
				errc <- err
			}()
			c, err := OpenTCP(host, 8080)
			if tc.dialErr != nil {
				if !errors.Is(err, ErrPortClosed) {
					t.Errorf("got %v, want ErrPortClosed", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := io.ReadAll(c); string(b) != "payload" {
					t.Errorf("got %q after the header", b)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := OpenTCP(nil, 0); err == nil {
		t.Error("port 0: no error")
	}
}
