package agent

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/agentbox/agentbox/agent/channel"
)

// fileReader reads a file for a file stream: a goroutine of its own reads
// the next buffer while the stream sends the last one, so the disk and the
// channel work at once. A file that fits in one buffer gets one.
//
// A regular file of at least one buffer is read with O_DIRECT where its
// filesystem allows: the disk's data lands in the buffer without the page
// cache, which costs the guest no copy (64 MiB under TCG: 0.12 s with dd
// against 0.3 s from the page cache and 0.65 s through it from the disk).
// The kernel writes a range's dirty pages back before it reads the range
// directly, so the data read is what the page cache holds.
type fileReader struct {
	f      *os.File
	direct bool // O_DIRECT is set; only run's goroutine touches it
	bufs   []*[]byte
	held   *[]byte // the buffer of the frame next returned last

	full chan chunk    // from run: a data frame read, in order
	free chan *[]byte  // to run: a buffer sent
	quit chan struct{} // closed by close: run ends
	done chan struct{} // closed when run has ended
}

// chunk is one read: a data frame of n bytes in b, or the file's end
// (io.EOF) or an error after them.
type chunk struct {
	b   *[]byte
	n   int
	err error
}

// newFileReader starts a reader of f, whose stat is fi. Its chunks
// arrive on next; close must end it.
func newFileReader(f *os.File, fi fs.FileInfo) *fileReader {
	r := &fileReader{
		f:    f,
		full: make(chan chunk, 1),
		free: make(chan *[]byte, 2),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	for range min(fi.Size()/streamBufSize+1, 2) {
		b := streamBufs.Get().(*[]byte)
		r.bufs = append(r.bufs, b)
		r.free <- b
	}
	if fi.Mode().IsRegular() && fi.Size() >= streamBufSize {
		r.direct = setDirect(f, true) == nil
	}
	go r.run()
	return r
}

// run reads the file into the free buffers until its end, an error, or
// quit.
func (r *fileReader) run() {
	defer close(r.done)
	for {
		var b *[]byte
		select {
		case b = <-r.free:
		case <-r.quit:
			return
		}
		n, err := r.read(dataOf(b))
		select {
		case r.full <- chunk{b: b, n: n, err: err}:
		case <-r.quit:
			return
		}
		if err != nil {
			return
		}
	}
}

// read fills b from the file, short only at its end (io.EOF) or on an
// error. A direct read the filesystem refuses (EINVAL: a short read left
// the offset unaligned, or it took the flag but not this read) goes on
// through the page cache.
func (r *fileReader) read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := r.f.Read(b[n:])
		n += k
		if err != nil && r.direct && errors.Is(err, syscall.EINVAL) {
			if err = setDirect(r.f, false); err != nil {
				return n, err
			}
			r.direct = false
			continue
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// next is the next chunk: its frame (header put) and the error after it.
// The frame stays valid until the next call.
func (r *fileReader) next() (frame []byte, err error) {
	if r.held != nil {
		r.free <- r.held
		r.held = nil
	}
	c, ok := <-r.full
	if !ok {
		return nil, io.ErrClosedPipe
	}
	r.held = c.b
	if c.n == 0 {
		return nil, c.err
	}
	frame = frameOf(c.b)[:channel.FrameHeader+c.n]
	channel.PutFrameHeader(frame, channel.FrameData, c.n)
	return frame, c.err
}

// close ends the reader and hands its buffers back.
func (r *fileReader) close() {
	close(r.quit)
	<-r.done
	for _, b := range r.bufs {
		streamBufs.Put(b)
	}
}
