// Package channel holds the tiny handshake that selects a guest port on a fresh
// agent-channel stream. Cloud Hypervisor's hybrid vsock speaks it natively
// ("CONNECT <port>\n" answered by "OK <n>\n"); the QEMU backend speaks the same
// words on each yamux stream over virtio-serial, so both transports look alike
// to guestinit and to the host. It also holds what rides on those streams
// that both ends must agree on: the ports, the port-forward header and the
// file streams' frames.
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

// ErrRefused is returned when the guest answers a CONNECT with anything but OK.
var ErrRefused = errors.New("channel: connect refused")

// maxLine bounds a handshake line (CONNECT, OK, TCP, ERR), newline
// included; the other end may be a hostile guest.
const maxLine = 512

// errLongLine is returned for a handshake line longer than maxLine.
var errLongLine = fmt.Errorf("channel: handshake line longer than %d bytes", maxLine)

// Connect writes the CONNECT request for port on conn and reads the answer.
// It returns a conn that yields any bytes the guest sent after the answer.
func Connect(conn net.Conn, port uint32) (net.Conn, error) {
	if _, err := fmt.Fprintf(conn, "CONNECT %d\n", port); err != nil {
		return nil, fmt.Errorf("channel: write connect: %w", err)
	}
	br := bufio.NewReaderSize(conn, maxLine)
	line, err := readLine(br)
	if err != nil {
		return nil, fmt.Errorf("channel: read answer: %w", err)
	}
	if !strings.HasPrefix(line, "OK") {
		return nil, fmt.Errorf("%w: port %d: %q", ErrRefused, port, line)
	}
	return &bufConn{Conn: conn, r: br}, nil
}

// Accept reads a CONNECT request from conn and returns the requested port.
// The caller answers with Reply.
func Accept(conn net.Conn) (uint32, net.Conn, error) {
	br := bufio.NewReaderSize(conn, maxLine)
	line, err := readLine(br)
	if err != nil {
		return 0, nil, fmt.Errorf("channel: read connect: %w", err)
	}
	rest, ok := strings.CutPrefix(line, "CONNECT ")
	if !ok {
		return 0, nil, fmt.Errorf("channel: bad request %q", line)
	}
	port, err := strconv.ParseUint(rest, 10, 32)
	if err != nil {
		return 0, nil, fmt.Errorf("channel: bad port %q: %w", rest, err)
	}
	return uint32(port), &bufConn{Conn: conn, r: br}, nil
}

// Reply answers an accepted request: OK when ok, an error line otherwise.
// (strconv, not fmt: the guest answers at every wake, and under TCG each
// package first run in a new VMM is translated.)
func Reply(conn net.Conn, port uint32, ok bool) error {
	p := strconv.FormatUint(uint64(port), 10)
	msg := "OK " + p + "\n"
	if !ok {
		msg = "ERR no listener on port " + p + "\n"
	}
	_, err := io.WriteString(conn, msg)
	return err
}

// readLine reads one line of at most maxLine bytes from br, whose buffer is
// maxLine bytes (bufio.Reader.ReadString would grow without a bound).
func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", errLongLine
	}
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(line), "\r\n"), nil
}

// bufConn is a net.Conn whose reads first drain a bufio.Reader.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }
