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

// streamBufs are the frame buffers of the file streams: a header and
// the largest data frame's body.
var streamBufs = sync.Pool{New: func() any {
	b := make([]byte, channel.FrameHeader+channel.MaxFrameData)
	return &b
}}

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
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	buf := *bp
	var werr error // a failed write, already told: the rest is drained
	for {
		_ = c.SetReadDeadline(time.Now().Add(streamIdle))
		typ, n, err := channel.ReadFrameHeader(c, buf)
		if err == nil && typ != channel.FrameData && typ != channel.FrameEnd && typ != channel.FrameError {
			err = fmt.Errorf("%w: a %q frame in the data", channel.ErrBadFrame, typ)
		}
		if err == nil {
			_, err = io.ReadFull(c, buf[:n])
		}
		if err != nil { // the host went, or broke the protocol
			h.release()
			return
		}
		if typ == channel.FrameError { // the host abandons the write: gone once answered
			h.release()
			sendErr(c, fmt.Errorf("agent: the host abandoned the write: %w", context.Canceled))
			return
		}
		if typ == channel.FrameEnd {
			break
		}
		if werr == nil {
			var w int
			w, werr = h.f.Write(buf[:n])
			h.size += uint64(w)
			if werr != nil {
				sendErr(c, werr)
			}
		}
	}
	if werr != nil {
		h.release()
		return
	}
	if err := h.commit(); err != nil {
		sendErr(c, err)
		return
	}
	var size [8]byte
	binary.BigEndian.PutUint64(size[:], h.size)
	_ = channel.WriteFrame(c, channel.FrameEnd, size[:])
}

// streamRead sends req's file as data frames, then FrameEnd at its end.
func streamRead(c net.Conn, req *agentv1.PathRequest) {
	file, info, err := openRead(req.Path)
	if err != nil {
		sendErr(c, err)
		return
	}
	defer file.Close()
	b, err := proto.Marshal(info)
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
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	buf := *bp
	for {
		n, err := io.ReadFull(file, buf[channel.FrameHeader:])
		if n > 0 {
			channel.PutFrameHeader(buf, channel.FrameData, n)
			_ = c.SetWriteDeadline(time.Now().Add(streamIdle))
			if _, werr := c.Write(buf[:channel.FrameHeader+n]); werr != nil {
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
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
