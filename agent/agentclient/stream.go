package agentclient

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agentbox/agentbox/agent/channel"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// WithFileStreams lets the client carry each whole file read and write on
// a stream of its own, which dial opens (a fresh stream on
// channel.FilesPort): the file's bytes go in data frames, with none of a
// call's encoding or round trip per chunk. A guest whose agent refuses the
// port (channel.ErrRefused: one older than file streams) gets the Files
// service's chunk calls, as a client without this option always does.
func WithFileStreams(dial func(ctx context.Context) (net.Conn, error)) Option {
	return func(o *options) { o.dialFiles = dial }
}

// fileStream opens a file stream, or returns nil when the client has none
// (no WithFileStreams, or a guest that refused one).
func (c *Client) fileStream(ctx context.Context) (*streamConn, error) {
	if c.dialFiles == nil || c.noStreams.Load() {
		return nil, nil
	}
	conn, err := c.dialFiles(ctx)
	if errors.Is(err, channel.ErrRefused) {
		c.noStreams.Store(true)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agentclient: open a file stream: %w", err)
	}
	return newStreamConn(ctx, conn, c.timeout), nil
}

// streamBufs are the host's frame buffers for writes.
var streamBufs = sync.Pool{New: func() any {
	b := make([]byte, channel.FrameHeader+channel.MaxFrameData)
	return &b
}}

// writeStream is WriteFile over file stream s, which it closes.
func (c *Client) writeStream(s *streamConn, create *agentv1.CreateRequest, src io.Reader) (int64, error) {
	defer s.Close()
	req, err := proto.Marshal(create)
	if err != nil {
		return 0, err
	}
	if err := s.arm(); err != nil {
		return 0, err
	}
	if err := channel.WriteFrame(s, channel.FrameWrite, req); err != nil {
		return 0, s.broken(err)
	}
	if _, err := s.answer(channel.FrameOpen); err != nil {
		return 0, err
	}
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	buf := *bp
	var sent int64
	for {
		n, rerr := io.ReadFull(src, buf[channel.FrameHeader:])
		if n > 0 {
			channel.PutFrameHeader(buf, channel.FrameData, n)
			if err := s.arm(); err != nil {
				return 0, err
			}
			if _, err := s.Write(buf[:channel.FrameHeader+n]); err != nil {
				return 0, s.broken(err)
			}
			sent += int64(n)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return 0, s.abandon(rerr)
		}
	}
	if err := s.arm(); err != nil {
		return 0, err
	}
	if err := channel.WriteFrame(s, channel.FrameEnd, nil); err != nil {
		return 0, s.broken(err)
	}
	body, err := s.answer(channel.FrameEnd)
	if err != nil {
		return 0, err
	}
	if len(body) != 8 {
		return 0, badReply("a write's end of %d bytes", len(body))
	}
	if got := binary.BigEndian.Uint64(body); got != uint64(sent) {
		return 0, badReply("a write of %d bytes ended with a size of %d", sent, got)
	}
	return sent, nil
}

// abandon ends a write whose source failed with err: the guest removes
// its temporary file and answers, so that none is left once WriteFile
// returns. Closing the stream would leave it to the guest's own time.
func (s *streamConn) abandon(err error) error {
	if s.arm() == nil && channel.WriteFrame(s, channel.FrameError, nil) == nil {
		_, _ = s.answer(channel.FrameEnd) // its answer is an error frame
	}
	return err
}

// openStream is Open over file stream s; the reader closes s.
func (c *Client) openStream(s *streamConn, path string) (io.ReadCloser, FileInfo, error) {
	req, err := proto.Marshal(&agentv1.PathRequest{Path: []byte(path)})
	if err == nil {
		err = s.arm()
	}
	if err == nil {
		if err = channel.WriteFrame(s, channel.FrameRead, req); err != nil {
			err = s.broken(err)
		}
	}
	var body []byte
	if err == nil {
		body, err = s.answer(channel.FrameOpen)
	}
	var info agentv1.FileInfo
	if err == nil {
		if uerr := proto.Unmarshal(body, &info); uerr != nil {
			err = badReply("a file description that does not decode: %v", uerr)
		}
	}
	fi := infoFrom(&info)
	if err == nil {
		err = checkInfo(fi)
	}
	if err != nil {
		s.Close()
		return nil, FileInfo{}, err
	}
	return &streamReader{s: s}, fi, nil
}

// streamReader reads a file's data frames off its stream.
type streamReader struct {
	s     *streamConn
	left  int   // bytes left in the current data frame
	err   error // how the stream ended: io.EOF after FrameEnd
	empty int   // empty data frames in a row
	hdr   [channel.FrameHeader]byte
}

func (r *streamReader) Read(p []byte) (int, error) {
	for r.left == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.err = r.next()
	}
	if err := r.s.arm(); err != nil {
		r.err = err
		return 0, err
	}
	n, err := r.s.Read(p[:min(len(p), r.left)])
	r.left -= n
	if err != nil {
		r.err = r.s.broken(channel.NoEOF(err))
		return n, r.err
	}
	return n, nil
}

// next reads the next frame's header: a data frame sets left, the end or
// an error is the reader's error from then on.
func (r *streamReader) next() error {
	if err := r.s.arm(); err != nil {
		return err
	}
	typ, n, err := channel.ReadFrameHeader(r.s, r.hdr[:])
	if err != nil {
		return r.s.broken(channel.NoEOF(err))
	}
	switch typ {
	case channel.FrameData:
		if r.left = n; n > 0 {
			r.empty = 0
		} else if r.empty++; r.empty > maxEmptyChunks {
			return badReply("%d empty data frames in a row", r.empty)
		}
		return nil
	case channel.FrameEnd, channel.FrameError:
		body := make([]byte, n)
		if _, err := io.ReadFull(r.s, body); err != nil {
			return r.s.broken(channel.NoEOF(err))
		}
		if typ == channel.FrameEnd {
			return io.EOF
		}
		return statusErr(body)
	}
	return badReply("a %q frame in a file's data", typ)
}

func (r *streamReader) Close() error { return r.s.Close() }

// streamConn is a file stream whose every wait is bounded by the client's
// call timeout and ends with its ctx.
type streamConn struct {
	net.Conn
	ctx     context.Context
	timeout time.Duration
	stop    func() bool
	mu      sync.Mutex
	ended   bool // ctx ended: the deadline stays in the past
}

func newStreamConn(ctx context.Context, conn net.Conn, timeout time.Duration) *streamConn {
	s := &streamConn{Conn: conn, ctx: ctx, timeout: timeout}
	s.stop = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.ended = true
		_ = s.Conn.SetDeadline(time.Now())
	})
	return s
}

// arm gives the stream's next wait the call timeout, unless its ctx ended.
func (s *streamConn) arm() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return s.ctx.Err()
	}
	if err := s.Conn.SetDeadline(time.Now().Add(s.timeout)); err != nil {
		return s.broken(err) // a conn whose other end closed may refuse deadlines (net.Pipe)
	}
	return nil
}

// broken says why a read or write of the stream failed: its ctx, or the
// stream itself (ErrClosed, as a dropped connection is).
func (s *streamConn) broken(err error) error {
	if cerr := s.ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, channel.ErrBadFrame) || errors.Is(err, ErrBadReply) {
		return fmt.Errorf("%w: %v", ErrBadReply, err)
	}
	return fmt.Errorf("%w: file stream: %v", ErrClosed, err)
}

// answer reads the guest's answer: a frame of type want (its body), or
// its error.
func (s *streamConn) answer(want byte) ([]byte, error) {
	if err := s.arm(); err != nil {
		return nil, err
	}
	typ, body, err := channel.ReadFrame(s, want, channel.FrameError)
	if err != nil {
		return nil, s.broken(err)
	}
	if typ == channel.FrameError {
		return nil, statusErr(body)
	}
	return body, nil
}

func (s *streamConn) Close() error {
	s.stop()
	return s.Conn.Close()
}

// statusErr is the error a FrameError's body carries, as fromStatus
// makes it of a call's.
func statusErr(body []byte) error {
	var sp spb.Status
	if err := proto.Unmarshal(body, &sp); err != nil {
		return badReply("an error that does not decode: %v", err)
	}
	if codes.Code(sp.Code) == codes.OK {
		return badReply("an error frame without an error")
	}
	return fromStatus(status.FromProto(&sp).Err())
}

// wireMode is the mode bits of mode that a write keeps, as the agent
// takes them.
func wireMode(mode fs.FileMode) uint32 {
	return uint32(mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
}
