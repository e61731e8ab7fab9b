package sandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/agentbox/agentbox/guestinit/agent"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// Hostile guest agents for the fake driver (vmmtest.FakeVM.ReplaceAgent):
// what root in a guest could put on the agent channel in guestinit's place.
// Each counts the bytes it sends in sent.

// countingWriter counts what an agent writes.
type countingWriter struct {
	net.Conn
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// drain reads and drops what hostd sends until conn closes.
func drain(conn net.Conn) { _, _ = io.Copy(io.Discard, conn) }

// garbageAgent answers anything with random bytes, without end.
func garbageAgent(sent *atomic.Int64) vmmtest.Agent {
	return func(conn net.Conn) {
		go drain(conn)
		buf := make([]byte, 64<<10)
		w := countingWriter{conn, sent}
		for {
			rand.Read(buf)
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}
}

// oversizedAgent sends frames far over ttrpc's 4 MiB limit, for the
// streams hostd opens, with zeros as their endless payload.
func oversizedAgent(sent *atomic.Int64) vmmtest.Agent {
	return func(conn net.Conn) {
		go drain(conn)
		w := countingWriter{conn, sent}
		zeros := make([]byte, 1<<20)
		for id := uint32(1); ; id += 2 {
			var h [10]byte
			binary.BigEndian.PutUint32(h[:4], 64<<20)
			binary.BigEndian.PutUint32(h[4:8], id)
			h[8] = 2 // a response
			if _, err := w.Write(h[:]); err != nil {
				return
			}
			for range 64 {
				if _, err := w.Write(zeros); err != nil {
					return
				}
			}
		}
	}
}

// dripAgent answers hostd's first call with a reply that never completes:
// a valid header for the call's stream, then a byte at a time, slowly.
func dripAgent(sent *atomic.Int64) vmmtest.Agent {
	return func(conn net.Conn) {
		var h [10]byte
		if _, err := io.ReadFull(conn, h[:]); err != nil {
			return
		}
		go drain(conn)
		binary.BigEndian.PutUint32(h[:4], 1<<20)
		h[8], h[9] = 2, 0 // a response, for the call's stream
		w := countingWriter{conn, sent}
		if _, err := w.Write(h[:]); err != nil {
			return
		}
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for range t.C {
			if _, err := w.Write([]byte{0}); err != nil {
				return
			}
		}
	}
}

// closingAgent closes every stream at once: a guest whose agent was killed.
func closingAgent(net.Conn) {}

// floodAgent serves well-formed ttrpc that a real agent never would:
// output and files without end, names past NAME_MAX and not UTF-8, event
// batches far over what was asked and fields far over their size. Calls it
// does not override go to the real agent (so nothing it is asked panics).
func floodAgent(sent *atomic.Int64) vmmtest.Agent {
	log := slog.New(slog.DiscardHandler)
	return func(conn net.Conn) {
		srv, err := ttrpc.NewServer()
		if err != nil {
			return
		}
		defer srv.Close()
		agentv1.RegisterExecService(srv, &floodExec{Exec: agent.NewExec(agent.WaitSpawner{}, log)})
		agentv1.RegisterFilesService(srv, &floodFiles{Files: agent.NewFiles()})
		agentv1.RegisterSystemService(srv, agent.NewSystem(time.Now()))
		agentv1.RegisterEventsService(srv, &floodEvents{})
		l := &oneListener{c: make(chan net.Conn, 1), done: make(chan struct{})}
		l.c <- &closeNotify{Conn: countingWriter{conn, sent}, l: l}
		_ = srv.Serve(context.Background(), l)
	}
}

// oneListener yields one connection and ends when it closes.
type oneListener struct {
	c    chan net.Conn
	done chan struct{}
	once atomic.Bool
}

func (l *oneListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *oneListener) Close() error {
	if l.once.CompareAndSwap(false, true) {
		close(l.done)
	}
	return nil
}
func (l *oneListener) Addr() net.Addr { return &net.UnixAddr{Name: "hostile"} }

// closeNotify closes its listener once a read or write fails (hostd hung
// up) or the server closes it, so that the server's Serve ends with it.
type closeNotify struct {
	net.Conn
	l *oneListener
}

func (c *closeNotify) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.l.Close()
	}
	return n, err
}

func (c *closeNotify) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.l.Close()
	}
	return n, err
}

func (c *closeNotify) Close() error {
	c.l.Close()
	return c.Conn.Close()
}

// floodExec starts nothing and streams 1 MiB chunks, never an exit.
type floodExec struct{ *agent.Exec }

var mib = bytes.Repeat([]byte("x"), 1<<20)

func (e *floodExec) Start(context.Context, *agentv1.StartRequest) (*agentv1.StartResponse, error) {
	return &agentv1.StartResponse{Id: "0123456789abcdef", Pid: 1}, nil
}

func (e *floodExec) Read(_ context.Context, r *agentv1.ReadOutputRequest) (*agentv1.ReadOutputResponse, error) {
	return &agentv1.ReadOutputResponse{NextOffset: r.Offset + 2<<20, Chunks: []*agentv1.OutputChunk{
		{Kind: agentv1.OutputKind_OUTPUT_KIND_STDOUT, Offset: r.Offset, Data: mib},
		{Kind: agentv1.OutputKind_OUTPUT_KIND_STDERR, Offset: r.Offset + 1<<20, Data: mib},
	}}, nil
}

func (e *floodExec) Summary(context.Context, *agentv1.SummaryRequest) (*agentv1.SessionSummary, error) {
	return &agentv1.SessionSummary{Stdout: &agentv1.StreamSummary{Head: mib, Tail: mib, TotalBytes: ^uint64(0)}}, nil
}

// floodFiles lists directories without end, in names that are not UTF-8,
// describes paths by names too long, and reads files without end.
type floodFiles struct{ *agent.Files }

func (f *floodFiles) List(_ context.Context, r *agentv1.ListRequest) (*agentv1.ListResponse, error) {
	out := &agentv1.ListResponse{More: true}
	start := 0
	if len(r.After) >= 8 {
		start = int(binary.BigEndian.Uint64(r.After[:8])) + 1
	}
	for i := start; i < start+4000; i++ {
		name := binary.BigEndian.AppendUint64(nil, uint64(i))
		name = append(name, bytes.Repeat([]byte{0xff, 0xfe}, 120)...)
		out.Entries = append(out.Entries, &agentv1.FileInfo{Name: name, Path: append([]byte("/root/"), name...)})
	}
	return out, nil
}

func (f *floodFiles) Stat(_ context.Context, r *agentv1.PathRequest) (*agentv1.FileInfo, error) {
	return &agentv1.FileInfo{Name: bytes.Repeat([]byte{0xc3}, 1<<20), Path: r.Path}, nil
}

func (f *floodFiles) Open(context.Context, *agentv1.PathRequest) (*agentv1.OpenResponse, error) {
	return &agentv1.OpenResponse{Handle: "h", Info: &agentv1.FileInfo{Name: []byte("f")}}, nil
}

func (f *floodFiles) ReadChunk(context.Context, *agentv1.ReadChunkRequest) (*agentv1.ReadChunkResponse, error) {
	return &agentv1.ReadChunkResponse{Data: mib}, nil
}

func (f *floodFiles) Close(context.Context, *agentv1.HandleRequest) (*agentv1.Empty, error) {
	return &agentv1.Empty{}, nil
}

// floodEvents answers every poll at once with a batch 50 times what was
// asked, seqs out of order, and fields far over their size.
type floodEvents struct{ head atomic.Uint64 }

func (e *floodEvents) Next(context.Context, *agentv1.NextEventsRequest) (*agentv1.NextEventsResponse, error) {
	out := &agentv1.NextEventsResponse{Lost: ^uint64(0)}
	for i := range 25000 {
		seq := e.head.Add(1)
		path := fmt.Sprintf("/root/f%d", seq)
		if i%100 == 0 {
			path = string(bytes.Repeat([]byte("p"), 8000))
		}
		if i%7 == 0 {
			seq = ^uint64(0) - seq
		}
		out.Events = append(out.Events, &agentv1.GuestEvent{Seq: seq, TimeUnixNano: int64(seq), ExecId: "nobody",
			Kind: &agentv1.GuestEvent_File{File: &agentv1.FileEvent{Op: "created", Path: path}}})
	}
	out.Head = e.head.Load()
	return out, nil
}
