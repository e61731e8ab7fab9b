package agent

import (
	"sort"
	"sync"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// readerLease is how long a reader counts as attached after its last Read.
// While one is attached, a full log holds the process back instead of
// dropping output the reader has not seen.
const readerLease = 30 * time.Second

// record is one chunk of output at a position in the combined log.
type record struct {
	kind agentv1.OutputKind
	off  uint64
	data []byte
}

// outputLog is a session's combined stdout/stderr log. It keeps the newest
// capacity bytes. Positions (offsets) count every byte ever appended.
type outputLog struct {
	mu       sync.Mutex
	capacity uint64
	records  []record
	start    uint64 // offset of records[0]
	end      uint64 // offset after the last byte
	held     uint64 // bytes in records
	closed   bool   // no more output will come
	changed  chan struct{}
	// readPos and readAt describe the attached reader: the position it asked
	// for last and when.
	readPos uint64
	readAt  time.Time
	now     func() time.Time
	// sums follow each stream whole (summary.go).
	sums map[agentv1.OutputKind]*streamSummary
}

func newOutputLog(capacity uint64) *outputLog {
	return &outputLog{capacity: capacity, changed: make(chan struct{}), now: time.Now}
}

// broadcast wakes everyone waiting on a change. Call with mu held.
func (l *outputLog) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// append adds data, first waiting while an attached reader has not read the
// bytes that would be dropped to make room.
func (l *outputLog) append(kind agentv1.OutputKind, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.mustWait(uint64(len(data))) {
		ch := l.changed
		lease := l.readAt.Add(readerLease).Sub(l.now())
		l.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(lease):
		}
		l.mu.Lock()
	}
	l.summary(kind).add(data)
	l.records = append(l.records, record{kind: kind, off: l.end, data: data})
	l.end += uint64(len(data))
	l.held += uint64(len(data))
	for l.held > l.capacity && len(l.records) > 1 {
		l.held -= uint64(len(l.records[0].data))
		l.records[0] = record{}
		l.records = l.records[1:]
		l.start = l.records[0].off
	}
	l.broadcast()
}

// mustWait reports whether appending n bytes would drop bytes that an
// attached reader has not read yet. Call with mu held.
func (l *outputLog) mustWait(n uint64) bool {
	if l.readAt.IsZero() || l.now().Sub(l.readAt) > readerLease {
		return false
	}
	if l.held+n <= l.capacity || len(l.records) == 0 {
		return false
	}
	// The first record would be dropped; wait if the reader still needs it.
	first := l.records[0]
	return l.readPos < first.off+uint64(len(first.data))
}

// close marks the end of output and wakes readers.
func (l *outputLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.broadcast()
}

// readResult is what one read returns.
type readResult struct {
	chunks []*agentv1.OutputChunk
	next   uint64
	lost   uint64
	eof    bool
}

// read returns up to max bytes from offset, waiting up to wait for data.
// It registers the caller as the attached reader.
func (l *outputLog) read(offset uint64, max int, wait time.Duration, done <-chan struct{}) readResult {
	return l.await(offset, max, wait, done, func() bool { return offset >= l.end })
}

// readToEnd is read for a caller who wants the whole output: it waits up
// to wait until the output has ended or holds max bytes from offset, then
// returns what there is. It registers the caller as the attached reader,
// so nothing it waits for is dropped.
func (l *outputLog) readToEnd(offset uint64, max int, wait time.Duration, done <-chan struct{}) readResult {
	return l.await(offset, max, wait, done, func() bool { return l.end < offset+uint64(max) })
}

// await registers the reader at offset, waits up to wait (or until done)
// while the log is open and more (called with mu held) says so, then
// collects.
func (l *outputLog) await(offset uint64, max int, wait time.Duration, done <-chan struct{}, more func() bool) readResult {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readPos, l.readAt = offset, l.now()
	l.broadcast()
	for !l.closed && more() {
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			l.mu.Lock()
			return l.collect(offset, max)
		case <-done:
			l.mu.Lock()
			return l.collect(offset, max)
		}
		l.mu.Lock()
	}
	return l.collect(offset, max)
}

// collect gathers records from offset. Call with mu held.
func (l *outputLog) collect(offset uint64, max int) readResult {
	var res readResult
	if offset < l.start {
		res.lost = l.start - offset
		offset = l.start
	}
	i := sort.Search(len(l.records), func(i int) bool {
		r := l.records[i]
		return r.off+uint64(len(r.data)) > offset
	})
	size := 0
	for ; i < len(l.records) && size < max; i++ {
		r := l.records[i]
		data := r.data[offset-r.off:]
		if room := max - size; len(data) > room {
			data = data[:room]
		}
		res.chunks = appendChunk(res.chunks, r.kind, offset, data)
		size += len(data)
		offset += uint64(len(data))
	}
	res.next = offset
	res.eof = l.closed && offset >= l.end
	return res
}

// appendChunk adds data to chunks, merging it into the last chunk when the
// kind is the same.
func appendChunk(chunks []*agentv1.OutputChunk, kind agentv1.OutputKind, off uint64, data []byte) []*agentv1.OutputChunk {
	if n := len(chunks); n > 0 && chunks[n-1].Kind == kind {
		last := chunks[n-1]
		last.Data = append(last.Data, data...)
		return chunks
	}
	return append(chunks, &agentv1.OutputChunk{Kind: kind, Offset: off, Data: append([]byte(nil), data...)})
}
