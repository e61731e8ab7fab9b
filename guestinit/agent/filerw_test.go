package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/agentbox/agentbox/agent/channel"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// streamPut writes data to path over a fresh file stream, in data frames
// of chunk bytes, and returns the size the guest reports.
func streamPut(t *testing.T, path string, data []byte, chunk int) uint64 {
	t.Helper()
	host, guest := yamuxPair(t)
	done := serve(NewFiles(), guest)
	defer returns(t, done, "write")
	defer host.Close()
	req, _ := proto.Marshal(&agentv1.CreateRequest{Path: []byte(path), Mode: 0o640})
	if err := channel.WriteFrame(host, channel.FrameWrite, req); err != nil {
		t.Fatal(err)
	}
	if _, _, err := channel.ReadFrame(host, channel.FrameOpen); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, channel.FrameHeader+chunk)
	for rest := data; len(rest) > 0; {
		n := copy(buf[channel.FrameHeader:], rest)
		rest = rest[n:]
		channel.PutFrameHeader(buf, channel.FrameData, n)
		if _, err := host.Write(buf[:channel.FrameHeader+n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := channel.WriteFrame(host, channel.FrameEnd, nil); err != nil {
		t.Fatal(err)
	}
	_, body, err := channel.ReadFrame(host, channel.FrameEnd)
	if err != nil || len(body) != 8 {
		t.Fatalf("end of the write: %q, %v", body, err)
	}
	return binary.BigEndian.Uint64(body)
}

// streamGet reads path over a fresh file stream.
func streamGet(t *testing.T, path string) []byte {
	t.Helper()
	host, guest := yamuxPair(t)
	done := serve(NewFiles(), guest)
	defer returns(t, done, "read")
	defer host.Close()
	req, _ := proto.Marshal(&agentv1.PathRequest{Path: []byte(path)})
	if err := channel.WriteFrame(host, channel.FrameRead, req); err != nil {
		t.Fatal(err)
	}
	if _, _, err := channel.ReadFrame(host, channel.FrameOpen); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	hdr := make([]byte, channel.FrameHeader)
	for {
		typ, n, err := channel.ReadFrameHeader(host, hdr)
		if err != nil {
			t.Fatal(err)
		}
		switch typ {
		case channel.FrameData:
			if _, err := io.CopyN(&got, host, int64(n)); err != nil {
				t.Fatal(err)
			}
		case channel.FrameEnd:
			return got.Bytes()
		default:
			t.Fatalf("a %q frame in the file's data", typ)
		}
	}
}

// TestFileStreamSizes: files around the write buffer's size and the
// direct I/O block, sent in frames that do not line up with either, come
// back byte for byte with their mode, and leave no temporary file.
func TestFileStreamSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, directAlign - 1, directAlign, streamBufSize - 1, streamBufSize, streamBufSize + 1, 3*streamBufSize + 12345} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		dir := t.TempDir()
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if n := streamPut(t, p, data, 300_001); n != uint64(size) {
			t.Errorf("size %d: the guest wrote %d bytes", size, n)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
			t.Errorf("size %d: the file on disk differs (%d bytes, %v)", size, len(got), err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("size %d: mode %v, %v; want 0640", size, fi.Mode(), err)
		}
		if got := streamGet(t, p); !bytes.Equal(got, data) {
			t.Errorf("size %d: read back %d bytes that differ", size, len(got))
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("size %d: temporary files left: %v", size, ents)
		}
	}
}

// TestFileStreamReadsDirtyPages: a file whose last writes are still in the
// page cache only reads back as written, direct I/O or not.
func TestFileStreamReadsDirtyPages(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*streamBufSize/16+5)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	copy(data[streamBufSize+7:], "fresh bytes, not yet written back")
	if _, err := f.WriteAt(data[streamBufSize+7:streamBufSize+40], streamBufSize+7); err != nil {
		t.Fatal(err)
	}
	if got := streamGet(t, p); !bytes.Equal(got, data) {
		t.Error("the read missed the page cache's dirty bytes")
	}
}

// openFile opens name with flag (creating it with O_CREATE) until the
// test ends.
func openFile(t *testing.T, name string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(name, flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// filled is a writer of f that has taken n zero bytes.
func filled(t *testing.T, f *os.File, n int) *fileWriter {
	t.Helper()
	w := newFileWriter(f)
	if err := w.fill(bytes.NewReader(make([]byte, n)), n); err != nil {
		w.abort()
		t.Fatal(err)
	}
	return w
}

// TestFileWriterDirect: a file of more than a buffer goes to the disk
// with O_DIRECT where the filesystem has it, and ends in buffered mode.
func TestFileWriterDirect(t *testing.T) {
	f := openFile(t, filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE)
	if setDirect(f, true) != nil || setDirect(f, false) != nil {
		t.Skip("the test directory's filesystem has no direct I/O")
	}
	w := filled(t, f, 2*streamBufSize+100)
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	if !w.direct {
		t.Error("the writer never switched to O_DIRECT")
	}
	if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_DIRECT != 0 {
		t.Errorf("flags %#x, %v: O_DIRECT is still set after finish", fl, err)
	}
}

// TestFileWriterNoDirect: a file whose filesystem refuses O_DIRECT is
// written through the page cache.
func TestFileWriterNoDirect(t *testing.T) {
	w := filled(t, openFile(t, os.DevNull, os.O_WRONLY), 3*streamBufSize)
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	if w.direct || w.total != 3*streamBufSize {
		t.Errorf("direct %v, total %d; want buffered writes of all %d bytes", w.direct, w.total, 3*streamBufSize)
	}
}

// TestFileWriterFailedWrite: a write that fails is reported by failed and
// by finish, and the data after it is dropped without a hang.
func TestFileWriterFailedWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w := filled(t, openFile(t, p, os.O_RDONLY), 4*streamBufSize) // every write fails
	if err := w.failed(); err == nil {
		t.Error("failed is nil after writes to a read-only file")
	}
	if err := w.finish(); err == nil {
		t.Error("finish is nil after writes to a read-only file")
	}
}

// TestFileWriterShortSource: fill returns its source's error.
func TestFileWriterShortSource(t *testing.T) {
	w := newFileWriter(openFile(t, filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE))
	defer w.abort()
	if err := w.fill(bytes.NewReader(make([]byte, 10)), 20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("fill of a short source: %v, want %v", err, io.ErrUnexpectedEOF)
	}
}

// TestFileStreamReadsEvictedFile: a file none of whose pages are in the
// page cache (read directly where the filesystem allows) and one with only
// some of them there read back as written.
func TestFileStreamReadsEvictedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	data := make([]byte, 2*streamBufSize+777)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if got := streamGet(t, p); !bytes.Equal(got, data) {
		t.Error("the evicted file read back differs")
	}
	if err := unix.Fadvise(int(f.Fd()), streamBufSize, streamBufSize, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if got := streamGet(t, p); !bytes.Equal(got, data) {
		t.Error("the partly evicted file read back differs")
	}
}

// TestFileStreamReadsFIFO: a named pipe, which has no offsets, streams
// what its writer wrote until the writer closes it.
func TestFileStreamReadsFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("fifo bytes "), streamBufSize/5)
	go func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		_, _ = f.Write(data)
	}()
	if got := streamGet(t, p); !bytes.Equal(got, data) {
		t.Errorf("read %d bytes of the pipe's %d, or they differ", len(got), len(data))
	}
}
