package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// PTY is an interactive connection to an exec session (a terminal, or any
// session with stdin): Read returns its output, Write feeds its stdin.
// Closing it leaves the session running.
type PTY struct {
	conn   *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	out    *io.PipeReader

	mu     sync.Mutex
	exited bool
	code   int
	signal string
	err    error
}

// ptyMessage is a control message of the pty WebSocket.
type ptyMessage struct {
	Type     string     `json:"type"`
	Rows     int        `json:"rows,omitempty"`
	Cols     int        `json:"cols,omitempty"`
	Signal   string     `json:"signal,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
	Error    *ErrorBody `json:"error,omitempty"`
}

// PTY connects to session execID's WebSocket and replays its output from
// offset. ctx bounds the whole connection.
func (c *Client) PTY(ctx context.Context, id, execID string, offset int64) (*PTY, error) {
	u, err := url.Parse(c.raw.Server)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	u = u.JoinPath("v1", "sandboxes", id, "exec", execID, "pty")
	u.RawQuery = "offset=" + strconv.FormatInt(offset, 10)
	// The request editors hold the API key.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for _, ed := range c.raw.RequestEditors {
		if err := ed(ctx, req); err != nil {
			return nil, err
		}
	}
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: req.Header})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, readAPIError(resp)
		}
		return nil, fmt.Errorf("client: pty: %w", err)
	}
	conn.SetReadLimit(8 << 20)
	pctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	p := &PTY{conn: conn, ctx: pctx, cancel: cancel, out: pr}
	go p.readLoop(pw)
	return p, nil
}

// readLoop moves output messages into the pipe until the exit.
func (p *PTY) readLoop(pw *io.PipeWriter) {
	for {
		typ, data, err := p.conn.Read(p.ctx)
		if err != nil {
			p.finish(pw, fmt.Errorf("client: pty closed before exit: %w", err))
			return
		}
		if typ == websocket.MessageBinary {
			if _, err := pw.Write(data); err != nil {
				return
			}
			continue
		}
		var m ptyMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		switch {
		case m.Type == "exit":
			p.mu.Lock()
			p.exited, p.signal = true, m.Signal
			if m.ExitCode != nil {
				p.code = *m.ExitCode
			}
			p.mu.Unlock()
			p.finish(pw, nil)
			return
		case m.Type == "error" && m.Error != nil:
			p.finish(pw, &APIError{Code: m.Error.Code, Message: m.Error.Message})
			return
		}
	}
}

func (p *PTY) finish(pw *io.PipeWriter, err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	if err == nil {
		pw.Close() // Read returns io.EOF after the last output
	} else {
		pw.CloseWithError(err)
	}
}

// Read reads the session's output; it returns io.EOF once the session has
// exited and all its output was read.
func (p *PTY) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write sends b to the session's stdin (keystrokes: Ctrl-C is 0x03).
func (p *PTY) Write(b []byte) (int, error) {
	if err := p.conn.Write(p.ctx, websocket.MessageBinary, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (p *PTY) control(m ptyMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return p.conn.Write(p.ctx, websocket.MessageText, b)
}

// Resize sets the terminal's size.
func (p *PTY) Resize(rows, cols int) error {
	return p.control(ptyMessage{Type: "resize", Rows: rows, Cols: cols})
}

// Signal sends a signal ("SIGINT", "TERM", "9") to the session's process group.
func (p *PTY) Signal(sig string) error { return p.control(ptyMessage{Type: "signal", Signal: sig}) }

// CloseStdin closes the session's stdin (on a terminal: sends ^D).
func (p *PTY) CloseStdin() error { return p.control(ptyMessage{Type: "eof"}) }

// Exit returns how the session ended, once Read has returned io.EOF; ok is
// false before that.
func (p *PTY) Exit() (code int, signal string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code, p.signal, p.exited
}

// Close closes the connection; the session runs on.
func (p *PTY) Close() error {
	// After the exit the server has closed already; that error is no news.
	_ = p.conn.Close(websocket.StatusNormalClosure, "")
	p.cancel()
	return p.out.Close()
}
