package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agentbox/agentbox/agent/channel"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Limits of the file streams (channel.FilesPort).
const (
	// streamIdle bounds each wait of a file stream on the host: for its
	// next frame, or for room to send one. A host that goes quiet past
	// it loses the transfer, and the guest its file.
	streamIdle = handleIdle
	// maxStreams bounds the file streams served at once.
	maxStreams = maxHandles
)

// ServeStreams serves the file streams accepted on l, each whole file
// transfer on its own goroutine, until l is closed; it then waits for the
// transfers under way (each ends when its stream does, or goes idle).
func (f *Files) ServeStreams(l net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxStreams)
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer c.Close()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
				f.ServeStream(c)
			default:
				sendErr(c, fmt.Errorf("%w: %d file streams open", errTooMany, maxStreams))
			}
		})
	}
}

// ServeStream serves one file stream on c (its first frame says which
// transfer) and returns when it is over. The caller closes c.
func (f *Files) ServeStream(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(streamIdle))
	typ, body, err := channel.ReadFrame(c, channel.FrameWrite, channel.FrameRead)
	if err != nil {
		sendErr(c, fmt.Errorf("%w: %v", errBadArgs, err))
		return
	}
	var write agentv1.CreateRequest
	var read agentv1.PathRequest
	req := proto.Message(&read)
	if typ == channel.FrameWrite {
		req = &write
	}
	if err := proto.Unmarshal(body, req); err != nil {
		sendErr(c, fmt.Errorf("%w: %v", errBadArgs, err))
		return
	}
	if typ == channel.FrameWrite {
		streamWrite(c, &write)
	} else {
		streamRead(c, &read)
	}
}

// streamWrite replaces req's file with the data frames that follow, once
// the host's FrameEnd says they are all there.
func streamWrite(c net.Conn, req *agentv1.CreateRequest) {
	h, err := createTemp(req)
	if err != nil {
		sendErr(c, err)
		return
	}
	if err := channel.WriteFrame(c, channel.FrameOpen, nil); err != nil {
		h.release()
		return
	}
	w := newFileWriter(h.f)
	if err := receive(c, w); err != nil {
		w.abort()
		h.release()
		if errors.Is(err, errAbandoned) { // answered once the file is gone
			sendErr(c, err)
		}
		return
	}
	err = w.finish()
	if err == nil {
		err = h.commit()
	} else {
		h.release()
	}
	if err != nil {
		sendErr(c, err)
		return
	}
	var size [8]byte
	binary.BigEndian.PutUint64(size[:], w.total)
	_ = channel.WriteFrame(c, channel.FrameEnd, size[:])
}

// Receive's answers for a write that ends without its data.
var (
	// errGone: the stream broke off, and there is no host to tell.
	errGone = errors.New("agent: the file stream ended without its data")
	// errAbandoned: the host sent FrameError, and waits for the answer
	// that says its temporary file is gone.
	errAbandoned = fmt.Errorf("agent: the host abandoned the write: %w", context.Canceled)
)

// receive reads a write's data frames from c into w up to the host's
// FrameEnd. A write that fails is told to the host at once, and its error
// returned once the rest is drained; a stream that breaks off returns
// errGone, and the host abandoning the write errAbandoned, which the
// caller answers.
func receive(c net.Conn, w *fileWriter) error {
	var hdr [channel.FrameHeader]byte
	var werr error // a failed write, already told: the rest is drained
	for {
		_ = c.SetReadDeadline(time.Now().Add(streamIdle))
		typ, n, err := channel.ReadFrameHeader(c, hdr[:])
		switch {
		case err != nil:
		case typ == channel.FrameData && werr == nil:
			err = w.fill(c, n)
		case typ == channel.FrameData, typ == channel.FrameEnd, typ == channel.FrameError:
			_, err = io.CopyN(io.Discard, c, int64(n))
		default:
			err = fmt.Errorf("%w: a %q frame in the data", channel.ErrBadFrame, typ)
		}
		if err != nil { // the host went, or broke the protocol
			return errGone
		}
		switch typ {
		case channel.FrameError:
			return errAbandoned
		case channel.FrameEnd:
			return werr
		}
		if werr == nil {
			if werr = w.failed(); werr != nil {
				sendErr(c, werr)
			}
		}
	}
}

// streamRead sends req's file as data frames, then FrameEnd at its end.
func streamRead(c net.Conn, req *agentv1.PathRequest) {
	file, fi, err := openRead(req.Path)
	if err != nil {
		sendErr(c, err)
		return
	}
	defer file.Close()
	b, err := proto.Marshal(infoOf(file.Name(), fi))
	if err != nil {
		sendErr(c, err)
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(streamIdle))
	if err := channel.WriteFrame(c, channel.FrameOpen, b); err != nil {
		return
	}
	stop := watchAbandon(c)
	defer stop()
	r := newFileReader(file, fi)
	defer r.close()
	for {
		frame, err := r.next()
		if len(frame) > 0 {
			_ = c.SetWriteDeadline(time.Now().Add(streamIdle))
			if _, werr := c.Write(frame); werr != nil {
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			_ = channel.WriteFrame(c, channel.FrameEnd, nil)
			return
		case err != nil:
			sendErr(c, err)
			return
		}
	}
}

// watchAbandon reads c while a file is sent on it: the host sends nothing
// more on a read, so its end of the stream closing (or anything else
// arriving) means it abandoned the transfer, and the write waiting for
// room ends at once instead of at streamIdle. stop ends the watch and
// waits for it.
func watchAbandon(c net.Conn) (stop func()) {
	var stopping atomic.Bool
	done := make(chan struct{})
	_ = c.SetReadDeadline(time.Time{}) // here, not in the goroutine: stop's deadline must win
	go func() {
		defer close(done)
		var one [1]byte
		_, _ = c.Read(one[:])
		if !stopping.Load() {
			_ = c.SetWriteDeadline(time.Now())
		}
	}()
	return func() {
		stopping.Store(true)
		_ = c.SetReadDeadline(time.Now())
		<-done
	}
}

// sendErr sends err to the host as FrameError, as a ttrpc call would
// return it.
func sendErr(c net.Conn, err error) {
	st := status.Convert(toStatus(err))
	b, merr := proto.Marshal(st.Proto())
	if merr != nil || len(b) > channel.MaxFrameMeta {
		b, _ = proto.Marshal(status.New(codes.Internal, "agent: an error too long to send").Proto())
	}
	_ = c.SetWriteDeadline(time.Now().Add(streamIdle))
	_ = channel.WriteFrame(c, channel.FrameError, b)
}
