package channel

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
)

// scriptConn is a net.Conn that reads a fixed script and records writes.
type scriptConn struct {
	net.Conn
	r io.Reader
	w bytes.Buffer
}

func (c *scriptConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *scriptConn) Close() error                { return nil }

// firstLine splits data at its first newline: the line (without "\r\n"),
// what follows, and whether the line fits maxLine.
func firstLine(data []byte) (line string, rest []byte, ok bool) {
	i := bytes.IndexByte(data, '\n')
	if i < 0 || i+1 > maxLine {
		return "", nil, false
	}
	return strings.TrimRight(string(data[:i+1]), "\r\n"), data[i+1:], true
}

// checkRest reads c to the end and requires exactly want: no byte the peer
// sent after the handshake line may be lost or invented.
func checkRest(t *testing.T, c net.Conn, want []byte) {
	t.Helper()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read after handshake: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after the handshake got %q, want %q", got, want)
	}
}

func addHandshakeSeeds(f *testing.F) {
	for _, s := range []string{
		"CONNECT 1024\n", "CONNECT 1024\r\npayload", "CONNECT 4294967295\n", "CONNECT 4294967296\n",
		"CONNECT -1\n", "CONNECT \n", "CONNECT 1", "connect 1\n", "OK 1024\n", "OK\nrest", "ERR no listener on port 9\n",
		"TCP 8080\n", "TCP 0\n", "TCP 65536\n", "TCP +80\n", "\n", "", strings.Repeat("A", maxLine) + "\n",
	} {
		f.Add([]byte(s))
	}
}

// FuzzAccept feeds a guest's (or host's) bytes to Accept: it accepts only
// a bounded "CONNECT <uint32>" line, returns that port, and passes every
// later byte on.
func FuzzAccept(f *testing.F) {
	addHandshakeSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		port, c, err := Accept(&scriptConn{r: bytes.NewReader(data)})
		line, rest, ok := firstLine(data)
		want, perr := uint64(0), error(nil)
		if ok {
			s, cut := strings.CutPrefix(line, "CONNECT ")
			want, perr = strconv.ParseUint(s, 10, 32)
			ok = cut && perr == nil
		}
		if !ok {
			if err == nil {
				t.Fatalf("Accept(%q) = %d, want an error", data, port)
			}
			return
		}
		if err != nil || uint64(port) != want {
			t.Fatalf("Accept(%q) = %d, %v; want %d", data, port, err, want)
		}
		checkRest(t, c, rest)
	})
}

// FuzzConnect feeds Connect an answer: only a bounded line starting with
// "OK" succeeds, anything else is ErrRefused or a read error; the request
// it wrote is one Accept parses back to the same port.
func FuzzConnect(f *testing.F) {
	addHandshakeSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := &scriptConn{r: bytes.NewReader(data)}
		const port = 4242
		c, err := Connect(conn, port)
		line, rest, ok := firstLine(data)
		switch {
		case ok && strings.HasPrefix(line, "OK"):
			if err != nil {
				t.Fatalf("Connect with answer %q: %v", data, err)
			}
			checkRest(t, c, rest)
		case ok:
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("Connect with answer %q: %v, want ErrRefused", data, err)
			}
		case err == nil:
			t.Fatalf("Connect with answer %q succeeded", data)
		}
		got, _, aerr := Accept(&scriptConn{r: bytes.NewReader(conn.w.Bytes())})
		if aerr != nil || got != port {
			t.Fatalf("Accept of Connect's request %q = %d, %v", conn.w.Bytes(), got, aerr)
		}
	})
}

// FuzzPortForward feeds both ends of the port-forward header: AcceptTCP
// takes only "TCP <1..65535>", OpenTCP only "OK" (an ERR line is
// ErrPortClosed), and ReplyTCP's answer for any error is one OpenTCP reads.
func FuzzPortForward(f *testing.F) {
	addHandshakeSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		port, c, err := AcceptTCP(&scriptConn{r: bytes.NewReader(data)})
		line, rest, ok := firstLine(data)
		if ok {
			s, cut := strings.CutPrefix(line, "TCP ")
			n, perr := strconv.Atoi(s)
			ok = cut && perr == nil && n >= 1 && n <= 65535
			if ok && (err != nil || port != n) {
				t.Fatalf("AcceptTCP(%q) = %d, %v; want %d", data, port, err, n)
			}
		}
		if !ok && err == nil {
			t.Fatalf("AcceptTCP(%q) = %d, want an error", data, port)
		}
		if ok {
			checkRest(t, c, rest)
		}

		oc, err := OpenTCP(&scriptConn{r: bytes.NewReader(data)}, 80)
		if line, rest, ok := firstLine(data); ok && line == "OK" {
			if err != nil {
				t.Fatalf("OpenTCP with answer %q: %v", data, err)
			}
			checkRest(t, oc, rest)
		} else if err == nil {
			t.Fatalf("OpenTCP with answer %q succeeded", data)
		}

		// Any dial error, however long or odd, comes back as ErrPortClosed.
		reply := &scriptConn{}
		if err := ReplyTCP(reply, errors.New(string(data))); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenTCP(&scriptConn{r: bytes.NewReader(reply.w.Bytes())}, 80); !errors.Is(err, ErrPortClosed) {
			t.Fatalf("OpenTCP of ReplyTCP(%q) = %v, want ErrPortClosed", data, err)
		}
	})
}

func TestLongHandshakeLineIsRefused(t *testing.T) {
	// A peer that never sends a newline must not make the reader buffer
	// without a bound.
	long := strings.Repeat("9", 1<<20)
	if _, _, err := Accept(&scriptConn{r: strings.NewReader("CONNECT " + long)}); err == nil {
		t.Fatal("Accept took a 1 MiB line")
	}
	if _, err := Connect(&scriptConn{r: strings.NewReader("OK" + long + "\n")}, 1); !errors.Is(err, errLongLine) {
		t.Fatalf("Connect: %v, want errLongLine", err)
	}
}
