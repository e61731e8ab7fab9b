package agentclient_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/agentbox/agentbox/agent/agentclient"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// ttrpc's frame: length(4) stream(4) type(1) flags(1), then the message.
const (
	frameHeader      = 10
	frameResponse    = 2
	maxGuestRequests = 8 // the fake guest answers this many, then hangs up
)

// hostileGuest reads the client's requests on conn and answers each with
// answer(streamID) (raw bytes, any framing), at most maxGuestRequests
// times or until answer says it was the last, then closes conn. (A guest
// that sends half a frame and stays makes a call wait for its ctx: that
// is the caller's deadline to bound, not something to fuzz.)
func hostileGuest(conn net.Conn, answer func(stream uint32) ([]byte, bool)) {
	defer conn.Close()
	var hdr [frameHeader]byte
	for range maxGuestRequests {
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, conn, int64(binary.BigEndian.Uint32(hdr[:4]))); err != nil {
			return
		}
		b, last := answer(binary.BigEndian.Uint32(hdr[4:8]))
		if _, err := conn.Write(b); err != nil || last {
			return
		}
	}
}

// responseFrame is a well-framed ttrpc response carrying a status and a
// payload the fuzzer chose, and an ErrnoDetail of its bytes if detail is
// not nil.
func responseFrame(stream uint32, code uint32, msg string, detail, payload []byte) []byte {
	// proto.Marshal refuses a string that is not UTF-8 (the raw mode
	// sends such bytes).
	st := status.New(codes.Code(code%20), strings.ToValidUTF8(msg, "?")).Proto()
	if detail != nil {
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/agentbox.agent.v1.ErrnoDetail", Value: detail})
	}
	if code%20 == 0 && detail == nil {
		st = nil
	}
	b, err := proto.Marshal(&ttrpc.Response{Status: st, Payload: payload})
	if err != nil {
		panic(err)
	}
	out := make([]byte, frameHeader, frameHeader+len(b))
	binary.BigEndian.PutUint32(out[:4], uint32(len(b)))
	binary.BigEndian.PutUint32(out[4:8], stream)
	out[8] = frameResponse
	return append(out, b...)
}

// calls are the client's calls whose replies the fuzzer feeds; each checks
// what it can about a successful result.
var calls = []func(ctx context.Context, t *testing.T, c *agentclient.Client) error{
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		_, err := c.Health(ctx)
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		_, err := c.Stat(ctx, "/x")
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		l, err := c.List(ctx, "/x")
		if err == nil && len(l) > agentclient.MaxListEntries {
			t.Fatalf("List returned %d entries", len(l))
		}
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		_, err := c.NextEvents(ctx, 0, time.Millisecond, 10)
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		_, err := c.Summary(ctx, "s1", 0)
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		_, err := c.Follow(ctx, "s1", 0, func(agentclient.Output) error { return nil })
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		r, _, err := c.Open(ctx, "/x")
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(io.Discard, r)
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		_, err := c.Sessions(ctx)
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		_, err := c.Readlink(ctx, "/x")
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		_, err := c.Start(ctx, agentclient.Command{Argv: []string{"true"}})
		return err
	},
	func(ctx context.Context, t *testing.T, c *agentclient.Client) error {
		st, err := c.StartWait(ctx, agentclient.Command{ID: "s1", Argv: []string{"true"}}, time.Millisecond, true)
		if err == nil && st.Summary != nil && !st.Exited {
			t.Fatal("StartWait gave a summary without the exit")
		}
		return err
	},
}

// runCall runs calls[which] against a guest that answers with answer and
// requires it to return (the guest hangs up after a few answers, so no
// call may wait past that) without a panic.
func runCall(t *testing.T, which uint8, answer func(uint32) ([]byte, bool)) error {
	host, guest := net.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() { hostileGuest(guest, answer) })
	c := agentclient.New(host)
	defer func() {
		c.Close()
		wg.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := calls[int(which)%len(calls)](ctx, t, c)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		t.Fatal("the call outlived a guest that had hung up")
	}
	return err
}

func seedReplies(f *testing.F) {
	info, _ := proto.Marshal(&agentv1.FileInfo{Name: []byte("a\xff"), Path: []byte("/x/a\xff"), Size: -1, Mode: 0xffffffff, ModTimeUnixNano: -1 << 63})
	list, _ := proto.Marshal(&agentv1.ListResponse{Entries: []*agentv1.FileInfo{{Name: []byte("b")}, {Name: []byte("a")}}, More: true})
	out, _ := proto.Marshal(&agentv1.ReadOutputResponse{Chunks: []*agentv1.OutputChunk{{Data: []byte("hi"), Offset: 1 << 63}}, Exited: true, ExitCode: -1})
	ev, _ := proto.Marshal(&agentv1.NextEventsResponse{Events: []*agentv1.GuestEvent{{Seq: 1}}, Head: 1, Lost: 1 << 63})
	errno, _ := proto.Marshal(&agentv1.ErrnoDetail{Errno: 2, Op: "open", Path: []byte("/x\x00")})
	for which := range uint8(len(calls)) {
		for _, p := range [][]byte{nil, info, list, out, ev, {0xff, 0xff, 0xff}} {
			f.Add(which, uint32(0), "", []byte(nil), p, false)
		}
		f.Add(which, uint32(codes.NotFound), "gone", errno, []byte(nil), false)
		f.Add(which, uint32(codes.InvalidArgument), "bad", []byte{0x08}, []byte(nil), false)
		f.Add(which, uint32(0), "", []byte(nil), []byte("\x00\x00\x00\x05\x00\x00\x00\x01\x02\x00garbage"), true)
		f.Add(which, uint32(0), "", []byte(nil), []byte("\xff\xff\xff\xff\x00\x00\x00\x01\x02\x00"), true)
	}
}

// FuzzReplies answers the client's calls the way a hostile guest can: a
// well-framed response with any status, detail and payload, or any raw
// bytes in place of a response. Every call returns, without a panic, and
// an errno detail the client accepts comes back as an *fs.PathError.
func FuzzReplies(f *testing.F) {
	seedReplies(f)
	f.Fuzz(func(t *testing.T, which uint8, code uint32, msg string, detail, payload []byte, raw bool) {
		err := runCall(t, which, func(stream uint32) ([]byte, bool) {
			if raw {
				return payload, true
			}
			return responseFrame(stream, code, msg, detail, payload), false
		})
		// Stat and Readlink keep the errno (others map their codes first);
		// ttrpc decodes the payload before it looks at the status.
		if k := int(which) % len(calls); raw || err == nil || detail == nil || code%20 == 0 || (k != 1 && k != 8) || len(payload) > 0 {
			return
		}
		var d agentv1.ErrnoDetail
		if proto.Unmarshal(detail, &d) == nil {
			var pe *fs.PathError
			if !errors.As(err, &pe) {
				t.Fatalf("errno detail %v came back as %v", &d, err)
			}
		}
	})
}
