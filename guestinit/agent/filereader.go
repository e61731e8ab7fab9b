package agent

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/agent/channel"
)

// fileReader reads a file for a file stream: a goroutine of its own reads
// the next buffer while the stream sends the last one, so the disk and the
// channel work at once. A file that fits in one buffer gets one.
//
// Each buffer of a regular file of at least one buffer comes from the page
// cache when all of it is there, and from the disk with O_DIRECT when it is
// not and the filesystem allows: the data lands in the buffer without
// passing through the page cache, which costs the guest no copy (64 MiB
// under TCG: 0.12 s with dd, against 0.65 s through the page cache from the
// disk). A file the API wrote is such a file: it went to the disk the same
// way. The kernel writes a range's dirty pages back before it reads the
// range directly, so the data read is what the page cache holds. Any
// other file (a pipe, a /proc file, a small one, one on a filesystem
// without direct I/O) is read in order, as a pipe has no offsets.
type fileReader struct {
	f    *os.File
	df   *os.File // f opened again with O_DIRECT, or nil; only run's goroutine uses it
	size int64    // f's size when opened
	off  int64    // where run reads next
	seq  bool     // f is read in order (a pipe has no offsets), never df
	bufs []*[]byte
	held *[]byte // the buffer of the frame next returned last

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
		size: fi.Size(),
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
		r.df = openDirect(f)
	}
	r.seq = r.df == nil
	go r.run()
	return r
}

// openDirect opens f again for reading with O_DIRECT, or returns nil where
// its filesystem has no direct I/O.
func openDirect(f *os.File) *os.File {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var df *os.File
	_ = sc.Control(func(fd uintptr) {
		df, _ = os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(fd)), os.O_RDONLY|unix.O_DIRECT, 0)
	})
	return df
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
		r.off += int64(n)
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

// read fills b from the file, short only at its end (io.EOF, or the size
// it had when opened) or on an error. A file read at offsets is read at
// r.off: from the page cache when it holds all of b's range, else
// directly. A direct read the filesystem refuses (EINVAL: it took the
// flag but not this read) is done, and those after it, through the page
// cache.
func (r *fileReader) read(b []byte) (int, error) {
	if r.seq {
		n, err := io.ReadFull(r.f, b)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return n, err
	}
	if r.df != nil {
		if n, ok := r.cached(b); ok {
			return n, nil
		}
		n, err := r.df.ReadAt(b, r.off)
		if err == nil || !errors.Is(err, syscall.EINVAL) {
			return n, err
		}
		r.df.Close()
		r.df = nil
	}
	return r.f.ReadAt(b, r.off)
}

// cached reads b's range, up to the file's size when opened, from the
// page cache if all of it is there, and reports whether it was.
func (r *fileReader) cached(b []byte) (int, bool) {
	want := min(int64(len(b)), r.size-r.off)
	if want <= 0 {
		return 0, false
	}
	sc, err := r.f.SyscallConn()
	if err != nil {
		return 0, false
	}
	n := 0
	cerr := sc.Control(func(fd uintptr) {
		n, err = unix.Preadv2(int(fd), [][]byte{b[:want]}, r.off, unix.RWF_NOWAIT)
	})
	return n, cerr == nil && err == nil && int64(n) == want
}

// next is the next chunk: its frame (header put) and the error after it.
// The frame stays valid until the next call.
func (r *fileReader) next() (frame []byte, err error) {
	if r.held != nil {
		r.free <- r.held
		r.held = nil
	}
	c := <-r.full
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
	if r.df != nil {
		r.df.Close()
	}
	for _, b := range r.bufs {
		streamBufs.Put(b)
	}
}
