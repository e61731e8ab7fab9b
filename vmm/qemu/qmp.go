package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// errQMPClosed is returned for commands on a closed QMP connection.
var errQMPClosed = errors.New("qemu: qmp connection closed")

// QMPError is an error answer from QEMU.
type QMPError struct {
	Command string
	Class   string
	Desc    string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qemu: qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// qmpEvent is an asynchronous QMP event.
type qmpEvent struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

type qmpRequest struct {
	cmd   string
	args  any
	fd    *os.File // sent with the command as SCM_RIGHTS (for getfd)
	reply chan qmpReply
}

type qmpReply struct {
	ret json.RawMessage
	err error
}

// qmp is a QMP client. One goroutine owns the socket: commands are queued to
// it and sent one at a time; each caller waits for its answer or its ctx.
type qmp struct {
	conn net.Conn
	reqs chan qmpRequest
	done chan struct{}
	once sync.Once

	subMu sync.Mutex
	subs  map[chan qmpEvent]struct{}
}

// qmpFD is QMP's listening socket's descriptor number in QEMU (the third
// of cmd.ExtraFiles).
const qmpFD = "5"

// listenQMP binds a VM's QMP socket at path and returns the listening
// socket, for QEMU to serve on (-chardev socket,fd=). The host can connect
// at once, even before QEMU runs: its connection waits in the backlog for
// QEMU's greeting, with no polling for the socket to appear. The path stays
// bound when the host's copy is closed, for a later Adopt.
func listenQMP(path string) (*os.File, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("qemu: qmp socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("qemu: qmp socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	f, err := ln.File()
	if cerr := ln.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("qemu: qmp socket: %w", err)
	}
	return f, nil
}

// dialQMP connects to a QMP socket and negotiates capabilities.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qemu: dial qmp: %w", err)
	}
	q := &qmp{conn: conn, reqs: make(chan qmpRequest), done: make(chan struct{}), subs: map[chan qmpEvent]struct{}{}}
	lines := make(chan []byte)
	go q.readLoop(bufio.NewReader(conn), lines)
	// The greeting comes first.
	select {
	case <-lines:
	case <-ctx.Done():
		conn.Close()
		return nil, ctx.Err()
	case <-q.done:
		return nil, errQMPClosed
	}
	go q.loop(lines)
	if _, err := q.run(ctx, "qmp_capabilities", nil); err != nil {
		q.close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) readLoop(r *bufio.Reader, lines chan<- []byte) {
	defer q.close()
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		select {
		case lines <- line:
		case <-q.done:
			return
		}
	}
}

// loop owns the socket: it writes one command, then reads lines until that
// command's answer, passing events along.
func (q *qmp) loop(lines <-chan []byte) {
	for {
		var req qmpRequest
		select {
		case req = <-q.reqs:
		case line := <-lines:
			q.event(line)
			continue
		case <-q.done:
			return
		}
		req.reply <- q.roundTrip(req, lines)
	}
}

func (q *qmp) roundTrip(req qmpRequest, lines <-chan []byte) qmpReply {
	msg := map[string]any{"execute": req.cmd}
	if req.args != nil {
		msg["arguments"] = req.args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return qmpReply{err: err}
	}
	if err := q.write(append(b, '\n'), req.fd); err != nil {
		return qmpReply{err: fmt.Errorf("qemu: qmp write: %w", err)}
	}
	for {
		select {
		case line := <-lines:
			var ans struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Class string `json:"class"`
					Desc  string `json:"desc"`
				} `json:"error"`
				Event string `json:"event"`
			}
			if err := json.Unmarshal(line, &ans); err != nil {
				return qmpReply{err: fmt.Errorf("qemu: qmp answer: %w", err)}
			}
			switch {
			case ans.Event != "":
				q.event(line)
			case ans.Error != nil:
				return qmpReply{err: &QMPError{Command: req.cmd, Class: ans.Error.Class, Desc: ans.Error.Desc}}
			default:
				return qmpReply{ret: ans.Return}
			}
		case <-q.done:
			return qmpReply{err: errQMPClosed}
		}
	}
}

// write sends b, with fd as SCM_RIGHTS in the same message when given.
func (q *qmp) write(b []byte, fd *os.File) error {
	if fd == nil {
		_, err := q.conn.Write(b)
		return err
	}
	uc, ok := q.conn.(*net.UnixConn)
	if !ok {
		return errors.New("qemu: qmp connection cannot pass fds")
	}
	_, _, err := uc.WriteMsgUnix(b, unix.UnixRights(int(fd.Fd())), nil)
	return err
}

// event passes an event to every subscriber that has room for it; one
// that has none misses it (subscribers re-check by a query now and then).
func (q *qmp) event(line []byte) {
	var ev qmpEvent
	if json.Unmarshal(line, &ev) != nil || ev.Event == "" {
		return
	}
	q.subMu.Lock()
	defer q.subMu.Unlock()
	for c := range q.subs {
		select {
		case c <- ev:
		default:
		}
	}
}

// subscribe returns a channel of the events QEMU sends from now on, and
// the function that ends the subscription.
func (q *qmp) subscribe() (<-chan qmpEvent, func()) {
	c := make(chan qmpEvent, 16)
	q.subMu.Lock()
	q.subs[c] = struct{}{}
	q.subMu.Unlock()
	return c, func() {
		q.subMu.Lock()
		delete(q.subs, c)
		q.subMu.Unlock()
	}
}

// runFD sends one command together with an open file (QMP getfd).
func (q *qmp) runFD(ctx context.Context, cmd string, args any, fd *os.File) (json.RawMessage, error) {
	return q.do(ctx, qmpRequest{cmd: cmd, args: args, fd: fd, reply: make(chan qmpReply, 1)})
}

// run sends one command and waits for its answer or ctx. A command whose ctx
// ends while queued is never sent.
func (q *qmp) run(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	return q.do(ctx, qmpRequest{cmd: cmd, args: args, reply: make(chan qmpReply, 1)})
}

// query runs a command that takes no arguments and decodes its answer
// into out (QEMU's answer is untrusted input: a bad one is an error).
func (q *qmp) query(ctx context.Context, cmd string, out any) error {
	raw, err := q.run(ctx, cmd, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("qemu: %s: %w", cmd, err)
	}
	return nil
}

func (q *qmp) do(ctx context.Context, req qmpRequest) (json.RawMessage, error) {
	select {
	case q.reqs <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-q.done:
		return nil, errQMPClosed
	}
	select {
	case r := <-req.reply:
		return r.ret, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (q *qmp) close() {
	q.once.Do(func() {
		close(q.done)
		q.conn.Close()
	})
}
