package channel

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/yamux"
)

// writeLog records each Write that reaches the transport.
type writeLog struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (l *writeLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.writes = append(l.writes, bytes.Clone(p))
	l.mu.Unlock()
	return l.Conn.Write(p)
}

// joined is a transport whose writes go through JoinFrames.
type joined struct {
	net.Conn
	w io.Writer
}

func (j joined) Write(p []byte) (int, error) { return j.w.Write(p) }

// Through a yamux session whose transport joins frames, every byte of
// every size arrives in order, and no small data frame's header is
// written on its own.
func TestJoinFramesUnderYamux(t *testing.T) {
	a, b := net.Pipe()
	log := &writeLog{Conn: a}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	client, err := yamux.Client(joined{Conn: log, w: JoinFrames(log)}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := yamux.Server(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	sizes := []int{1, 11, 12, 13, 4096, maxJoined, maxJoined + 1, 1 << 20}
	var want bytes.Buffer
	for _, n := range sizes {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rand.IntN(256))
		}
		want.Write(p)
	}
	got := make(chan []byte, 1)
	go func() {
		st, err := server.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(st)
		got <- b
	}()
	st, err := client.Open()
	if err != nil {
		t.Fatal(err)
	}
	data := want.Bytes()
	for _, n := range sizes {
		if _, err := st.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	st.Close()
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("got %d bytes, want the %d written, in order", len(b), want.Len())
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	for i, w := range log.writes {
		if len(w) != YamuxHeader || w[1] != YamuxData {
			continue
		}
		if n := binary.BigEndian.Uint32(w[8:]); n > 0 && n <= maxJoined {
			t.Errorf("write %d: a data header (body %d bytes) written on its own", i, n)
		}
	}
}

// Writes that are not a data frame's header pass through as they are.
func TestJoinFramesPassesOthersThrough(t *testing.T) {
	var out bytes.Buffer
	w := JoinFrames(&out)
	update := []byte{0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9} // window update
	if n, err := w.Write(update); n != len(update) || err != nil || !bytes.Equal(out.Bytes(), update) {
		t.Fatalf("window update: wrote %d, %v; transport has %x", n, err, out.Bytes())
	}
	out.Reset()
	empty := []byte{0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0} // data, no body
	if n, err := w.Write(empty); n != len(empty) || err != nil || !bytes.Equal(out.Bytes(), empty) {
		t.Fatalf("bodiless data frame: wrote %d, %v; transport has %x", n, err, out.Bytes())
	}
	out.Reset()
	hdr := []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3}
	if n, err := w.Write(hdr); n != len(hdr) || err != nil || out.Len() != 0 {
		t.Fatalf("data header: wrote %d, %v; transport has %x, want it held", n, err, out.Bytes())
	}
	if n, err := w.Write([]byte("abc")); n != 3 || err != nil || out.String() != string(hdr)+"abc" {
		t.Fatalf("body: wrote %d, %v; transport has %x, want header and body", n, err, out.Bytes())
	}
}
