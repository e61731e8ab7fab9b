package channel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// ErrPortClosed is returned by OpenTCP when nothing in the guest accepts
// connections on the requested TCP port.
var ErrPortClosed = errors.New("channel: guest port not accepting connections")

// The port-forward header. A stream on channel.PortForwardPort starts with
// "TCP <port>\n" from the host; the guest dials 127.0.0.1:<port> and answers
// "OK\n", then both ends carry the connection's raw bytes, or it answers
// "ERR <reason>\n" and closes the stream.

// OpenTCP asks the guest end of conn (a fresh stream on channel.PortForwardPort)
// to connect to TCP port. On success the returned conn carries that TCP
// connection's bytes. A refused connection is an error wrapping
// ErrPortClosed.
func OpenTCP(conn net.Conn, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("channel: bad tcp port %d", port)
	}
	if _, err := fmt.Fprintf(conn, "TCP %d\n", port); err != nil {
		return nil, fmt.Errorf("channel: write tcp header: %w", err)
	}
	br := bufio.NewReaderSize(conn, maxAnswer)
	line, err := readLine(br)
	if err != nil {
		return nil, fmt.Errorf("channel: read tcp answer: %w", err)
	}
	if line != "OK" {
		return nil, fmt.Errorf("%w: port %d: %s", ErrPortClosed, port, strings.TrimPrefix(line, "ERR "))
	}
	return &bufConn{Conn: conn, r: br}, nil
}

// maxAnswer bounds the guest's answer line (an error's text).
const maxAnswer = 256

// AcceptTCP reads the header of a port-forward stream and returns the TCP
// port it names. The caller answers with ReplyTCP.
func AcceptTCP(conn net.Conn) (int, net.Conn, error) {
	br := bufio.NewReaderSize(conn, maxLine)
	line, err := readLine(br)
	if err != nil {
		return 0, nil, fmt.Errorf("channel: read tcp header: %w", err)
	}
	rest, ok := strings.CutPrefix(line, "TCP ")
	if !ok {
		return 0, nil, fmt.Errorf("channel: bad tcp header %q", line)
	}
	port, err := strconv.Atoi(rest)
	if err != nil || port < 1 || port > 65535 {
		return 0, nil, fmt.Errorf("channel: bad tcp port %q", rest)
	}
	return port, &bufConn{Conn: conn, r: br}, nil
}

// ReplyTCP answers a port-forward header: OK when dialErr is nil, else an
// error line that OpenTCP turns into ErrPortClosed.
func ReplyTCP(conn net.Conn, dialErr error) error {
	msg := "OK\n"
	if dialErr != nil {
		reason := strings.NewReplacer("\n", " ", "\r", " ").Replace(dialErr.Error())
		if len(reason) > maxAnswer-8 {
			reason = reason[:maxAnswer-8]
		}
		msg = "ERR " + reason + "\n"
	}
	_, err := io.WriteString(conn, msg)
	return err
}

// CloseWrite half-closes c's write side when its transport can (TCP, vsock),
// and closes it otherwise. A yamux stream's Close is itself a half-close:
// it sends FIN and keeps reading.
func CloseWrite(c net.Conn) error {
	if b, ok := c.(*bufConn); ok {
		c = b.Conn
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
