package agentclient_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
)

// frame is a file stream frame as a hostile guest may send it: any type,
// any length in its header, any body.
func frame(typ byte, length uint32, body []byte) []byte {
	b := make([]byte, channel.FrameHeader, channel.FrameHeader+len(body))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:], length)
	return append(b, body...)
}

// hostileStreams returns a client whose file streams reach a guest that
// reads the host's request frame and answers with answer's bytes, then
// keeps reading (or, with hang, sends nothing at all).
func hostileStreams(t *testing.T, answer []byte, hang bool) *agentclient.Client {
	t.Helper()
	var wg sync.WaitGroup
	dial := func(ctx context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		wg.Go(func() {
			defer guest.Close()
			if _, _, err := channel.ReadFrame(guest, channel.FrameRead, channel.FrameWrite); err != nil || hang {
				io.Copy(io.Discard, guest)
				return
			}
			wg.Go(func() { io.Copy(io.Discard, guest) })
			guest.Write(answer)
		})
		return host, nil
	}
	host, _ := net.Pipe()
	c := agentclient.New(host, agentclient.WithFileStreams(dial), agentclient.WithCallTimeout(time.Second))
	t.Cleanup(func() { c.Close(); wg.Wait() })
	return c
}

// TestFileStreamHostileGuest: whatever a guest sends on a file stream, a
// read or write ends with an error within the call timeout, and never
// takes more than the frame bounds allow.
func TestFileStreamHostileGuest(t *testing.T) {
	okStatus, _ := proto.Marshal(&spb.Status{Code: 0, Message: "fine"})
	cases := []struct {
		name   string
		answer []byte
		hang   bool
		want   error
	}{
		{"silent", nil, true, agentclient.ErrClosed},
		{"unknown frame type", frame('?', 0, nil), false, agentclient.ErrBadReply},
		{"oversized open", frame(channel.FrameOpen, channel.MaxFrameMeta+1, nil), false, agentclient.ErrBadReply},
		{"oversized data", append(frame(channel.FrameOpen, 0, nil), frame(channel.FrameData, channel.MaxFrameData+1, nil)...), false, agentclient.ErrBadReply},
		{"endless empty data", append(frame(channel.FrameOpen, 0, nil), bytes.Repeat(frame(channel.FrameData, 0, nil), 100)...), false, agentclient.ErrBadReply},
		{"error without an error", frame(channel.FrameError, uint32(len(okStatus)), okStatus), false, agentclient.ErrBadReply},
		{"error that does not decode", frame(channel.FrameError, 3, []byte{0xff, 0xff, 0xff}), false, agentclient.ErrBadReply},
		{"cut short", append(frame(channel.FrameOpen, 0, nil), frame(channel.FrameData, 100, []byte("ab"))...), false, agentclient.ErrClosed},
		{"data ends without an end", frame(channel.FrameOpen, 0, nil), false, agentclient.ErrClosed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := hostileStreams(t, tc.answer, tc.hang)
			ctx := context.Background()
			err := func() error {
				r, _, err := c.Open(ctx, "/f")
				if err != nil {
					return err
				}
				defer r.Close()
				_, err = io.Copy(io.Discard, r)
				return err
			}()
			if !errors.Is(err, tc.want) {
				t.Errorf("read: %v, want %v", err, tc.want)
			}
			_, err = c.WriteFile(ctx, "/f", 0o644, bytes.NewReader(make([]byte, 3<<20)))
			if err == nil {
				t.Error("write succeeded")
			}
		})
	}
}

// TestFileStreamEndsWithCtx: a transfer whose ctx ends returns the ctx's
// error at once, though the guest never answers.
func TestFileStreamEndsWithCtx(t *testing.T) {
	c := hostileStreams(t, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := c.Open(ctx, "/f"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("open: %v, want the ctx's deadline", err)
	}
}

// FuzzFileStream: whatever a guest answers on a file stream, a read ends
// without a panic, and never yields more bytes than the guest sent.
func FuzzFileStream(f *testing.F) {
	f.Add(append(frame(channel.FrameOpen, 0, nil), append(frame(channel.FrameData, 3, []byte("abc")), frame(channel.FrameEnd, 0, nil)...)...))
	f.Add(frame(channel.FrameOpen, 2, []byte{0x0a, 0x00}))
	f.Add(append(frame(channel.FrameOpen, 0, nil), frame(channel.FrameError, 2, []byte{0x08, 0x05})...))
	f.Add(frame(channel.FrameData, 0xffffffff, nil))
	f.Fuzz(func(t *testing.T, answer []byte) {
		c := hostileStreams(t, answer, false)
		r, _, err := c.Open(context.Background(), "/f")
		if err != nil {
			return
		}
		defer r.Close()
		got, _ := io.ReadAll(r)
		if len(got) > len(answer) {
			t.Fatalf("read %d bytes of a %d-byte answer", len(got), len(answer))
		}
	})
}
