package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

const (
	// ptyPingEvery keeps an idle terminal's WebSocket alive through proxies.
	ptyPingEvery = 20 * time.Second
	// maxPTYMessage bounds one client message (stdin or control).
	maxPTYMessage = 1 << 20
)

// ptyControl is a JSON text message on the pty WebSocket, either way.
type ptyControl struct {
	Type     string     `json:"type"`
	Rows     int        `json:"rows,omitempty"`
	Cols     int        `json:"cols,omitempty"`
	Signal   string     `json:"signal,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
	Error    *ErrorBody `json:"error,omitempty"`
}

// ExecPTY drives a session over a WebSocket: stdin and output as binary
// messages, resize, signal and eof as JSON text messages, the exit last.
func (s *server) ExecPTY(w http.ResponseWriter, r *http.Request, id SandboxID, execID ExecID, params ExecPTYParams) {
	if params.Offset < 0 {
		s.writeError(w, r, badRequest(CodeInvalidParam, "offset must not be negative"))
		return
	}
	if err := s.findSession(r.Context(), id, execID); err != nil {
		s.writeError(w, r, err)
		return
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled, Subprotocols: []string{ptySubprotocol}})
	if err != nil {
		return // Accept has answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxPTYMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		defer cancel() // the client closed: stop following (the session runs on)
		if err := s.ptyInput(ctx, conn, id, execID); err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelDebug, "pty input ended", slog.String("sandbox_id", id), slog.Any("err", err))
		}
	}()
	go ptyPing(ctx, conn)
	err = s.m.Attach(ctx, id, execID, uint64(params.Offset), func(ev sandbox.ExecEvent) error {
		switch ev.Type {
		case sandbox.EventStdout, sandbox.EventStderr:
			return conn.Write(ctx, websocket.MessageBinary, ev.Data)
		case sandbox.EventExit:
			code := ev.ExitCode
			return writeControl(ctx, conn, ptyControl{Type: "exit", ExitCode: &code, Signal: ev.Signal})
		}
		return nil
	})
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		body := errorBody(err)
		_ = writeControl(ctx, conn, ptyControl{Type: "error", Error: &body})
		conn.Close(websocket.StatusInternalError, body.Code)
		return
	}
	conn.Close(websocket.StatusNormalClosure, "exited")
}

// ptyInput reads the client's messages until it closes.
func (s *server) ptyInput(ctx context.Context, conn *websocket.Conn, id, execID string) error {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageBinary {
			if len(data) > 0 {
				if err := s.m.WriteStdin(ctx, id, execID, data, false); err != nil {
					return err
				}
			}
			continue
		}
		var c ptyControl
		if err := json.Unmarshal(data, &c); err != nil {
			// Text messages are JSON by the protocol: one that is not
			// breaks it, and the socket is closed saying so (it was
			// dropped without a close frame).
			conn.Close(websocket.StatusInvalidFramePayloadData, "a text message must be a JSON control message")
			return errors.Join(errors.New("api: bad pty control message"), err)
		}
		if err := s.ptyControl(ctx, id, execID, c); err != nil {
			body := errorBody(err)
			_ = writeControl(ctx, conn, ptyControl{Type: "warning", Error: &body})
		}
	}
}

func (s *server) ptyControl(ctx context.Context, id, execID string, c ptyControl) error {
	switch c.Type {
	case "resize":
		return s.m.Resize(ctx, id, execID, c.Rows, c.Cols)
	case "signal":
		sig, err := parseSignal(c.Signal)
		if err != nil {
			return err
		}
		return s.m.Signal(ctx, id, execID, sig)
	case "eof":
		return s.m.WriteStdin(ctx, id, execID, nil, true)
	}
	return badRequest(CodeInvalidRequest, "unknown pty message type %q", c.Type)
}

func writeControl(ctx context.Context, conn *websocket.Conn, c ptyControl) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

func ptyPing(ctx context.Context, conn *websocket.Conn) {
	t := time.NewTicker(ptyPingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, ptyPingEvery)
		err := conn.Ping(pctx)
		cancel()
		if err != nil {
			return
		}
	}
}
