package agentclient_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// rawAgent reads hostd's first request frame and answers with reply(id),
// counting the bytes it manages to write.
func rawAgent(t *testing.T, reply func(id uint32) []byte, tail []byte) (*agentclient.Client, *atomic.Int64) {
	t.Helper()
	host, guest := net.Pipe()
	var wrote atomic.Int64
	go func() {
		defer guest.Close()
		var h [10]byte
		if _, err := io.ReadFull(guest, h[:]); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, guest, int64(binary.BigEndian.Uint32(h[:4]))); err != nil {
			return
		}
		go io.Copy(io.Discard, guest)
		n, err := guest.Write(reply(binary.BigEndian.Uint32(h[4:8])))
		wrote.Add(int64(n))
		for err == nil && tail != nil {
			n, err = guest.Write(tail)
			wrote.Add(int64(n))
		}
	}()
	c := agentclient.New(host)
	t.Cleanup(func() { c.Close() })
	return c, &wrote
}

func header(length, id uint32, typ byte) []byte {
	b := make([]byte, 10)
	binary.BigEndian.PutUint32(b[:4], length)
	binary.BigEndian.PutUint32(b[4:8], id)
	b[8] = typ
	return b
}

// Frames that no agent sends end the connection, and so the call, at once:
// the client neither waits for its deadline nor reads an oversized body.
func TestGuardRefusesForgedFrames(t *testing.T) {
	for name, tc := range map[string]struct {
		reply func(id uint32) []byte
		tail  []byte
	}{
		"a stream never opened":  {func(id uint32) []byte { return header(0, id+2, 2) }, nil},
		"a request to the host":  {func(id uint32) []byte { return header(0, id, 1) }, nil},
		"a frame over 4 MiB":     {func(id uint32) []byte { return header(64<<20, id, 2) }, make([]byte, 1<<20)},
		"stream data (no calls)": {func(id uint32) []byte { return header(0, id, 3) }, nil},
	} {
		t.Run(name, func(t *testing.T) {
			c, wrote := rawAgent(t, tc.reply, tc.tail)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.Health(ctx)
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("health: %v, want the connection refused", err)
			}
			if n := wrote.Load(); n > 4<<20 {
				t.Errorf("the client read %d bytes of a forged frame", n)
			}
		})
	}
}

// A call whose answer never completes ends at the client's call timeout.
func TestCallTimeout(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	go io.Copy(io.Discard, guest)
	c := agentclient.New(host, agentclient.WithCallTimeout(200*time.Millisecond))
	defer c.Close()
	if _, err := c.Health(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("health of a silent agent: %v, want a deadline error", err)
	}
}

// TestWhySaysTheBreach: a client that closes its connection on a reply
// over bounds says why; an open one says nothing.
func TestWhySaysTheBreach(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	c := agentclient.New(host)
	defer c.Close()
	if err := c.Why(); err != nil {
		t.Fatalf("Why of an open connection: %v", err)
	}
	go func() {
		// ttrpc's header (length, stream 7, type response, flags): a
		// response to a stream the host never opened.
		hdr := make([]byte, 10)
		binary.BigEndian.PutUint32(hdr[4:8], 7)
		hdr[8] = 2
		_, _ = guest.Write(hdr)
	}()
	_ = c.Wait(context.Background())
	if err := c.Why(); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Errorf("Why after a bogus frame: %v, want the breach", err)
	}
}
