package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

const (
	// maxStdin bounds ExecRequest.stdin; maxExecBody leaves room for its
	// JSON escaping.
	maxStdin    = 16 << 20
	maxExecBody = 2*maxStdin + maxJSONBody
	// maxCollected bounds each of stdout and stderr in the collected form.
	maxCollected = 16 << 20
	// maxStreamChunk bounds the output bytes of one streamed event, so a
	// client can read the stream with a bounded line buffer.
	maxStreamChunk = 1 << 20
)

var errNoExit = errors.New("api: exec ended without an exit event")

func (s *server) ExecCommand(w http.ResponseWriter, r *http.Request, id SandboxID, params ExecCommandParams) {
	var req ExecRequest
	if err := decodeJSON(w, r, maxExecBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	sreq, err := toExecRequest(req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Background {
		s.execBackground(w, r, id, sreq)
		return
	}
	if params.Stream {
		s.execStream(w, r, id, sreq)
		return
	}
	sreq.Collect = true
	s.execCollect(w, r, id, sreq)
}

func toExecRequest(req ExecRequest) (sandbox.ExecRequest, error) {
	switch {
	case len(req.Cmd) == 0 || req.Cmd[0] == "":
		return sandbox.ExecRequest{}, badRequest(CodeInvalidRequest, "cmd must name a command")
	case len(req.Stdin) > maxStdin:
		return sandbox.ExecRequest{}, badRequest(CodeInvalidRequest, "stdin is larger than %d bytes", maxStdin)
	}
	if _, err := seconds("timeout_s", req.TimeoutS, maxWaitS); err != nil {
		return sandbox.ExecRequest{}, err
	}
	if err := checkEnv("env", req.Env); err != nil {
		return sandbox.ExecRequest{}, err
	}
	if req.Cwd != "" {
		if err := checkPath(req.Cwd); err != nil {
			return sandbox.ExecRequest{}, err
		}
	}
	if err := sandbox.CheckUser(req.User); err != nil {
		return sandbox.ExecRequest{}, err
	}
	out := sandbox.ExecRequest{Cmd: req.Cmd, Env: req.Env, Cwd: req.Cwd, Tty: req.Tty, Rows: req.Rows, Cols: req.Cols, TimeoutS: req.TimeoutS,
		User: req.User}
	if req.Stdin != "" {
		out.Stdin = []byte(req.Stdin)
	}
	return out, nil
}

// execCollect runs the command to its end and answers with an ExecResult,
// keeping at most maxCollected bytes of each output stream, and no more
// than what is left of the server's budget for collected output (shared by
// all collected execs: maxCollectedTotal). The output's event payloads are
// kept as they came and encoded straight into the response.
func (s *server) execCollect(w http.ResponseWriter, r *http.Request, id string, req sandbox.ExecRequest) {
	var (
		res    ExecResult
		stdout = &collected{max: maxCollected, budget: s.collect}
		stderr = &collected{max: maxCollected, budget: s.collect}
		exited bool
	)
	defer stdout.release()
	defer stderr.release()
	err := s.m.Exec(r.Context(), id, req, func(ev sandbox.ExecEvent) error {
		switch ev.Type {
		case sandbox.EventStart:
			res.ExecID = ev.ExecID
		case sandbox.EventStdout:
			stdout.add(ev.Data)
		case sandbox.EventStderr:
			stderr.add(ev.Data)
		case sandbox.EventExit:
			res.ExitCode, res.Signal, exited = ev.ExitCode, ev.Signal, true
		}
		return nil
	})
	if err == nil && !exited {
		err = errNoExit
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res.Truncated = stdout.truncated || stderr.truncated
	writeExecResult(w, res, stdout, stderr)
}

// execStream answers with NDJSON events, each flushed as it is written. An
// error before the first event is an ordinary error response; after it, an
// error event ends the stream.
func (s *server) execStream(w http.ResponseWriter, r *http.Request, id string, req sandbox.ExecRequest) {
	ew := newEventWriter(w)
	defer ew.keepAlive()()
	err := s.m.Exec(r.Context(), id, req, ew.emit)
	s.endStream(w, r, id, ew, err)
}

// endStream ends an NDJSON stream that s.m returned from with err.
func (s *server) endStream(w http.ResponseWriter, r *http.Request, id string, ew *eventWriter, err error) {
	if err == nil && !ew.exited {
		err = errNoExit
	}
	switch {
	case err == nil:
		return
	case !ew.started:
		s.writeError(w, r, err)
		return
	case ew.broken || r.Context().Err() != nil:
		return
	}
	body := errorBody(err)
	s.log.LogAttrs(r.Context(), slog.LevelWarn, "exec stream ended abnormally",
		slog.String("sandbox_id", id), slog.String("code", body.Code), slog.Any("err", err))
	_ = ew.write(ExecEvent{Type: ExecEventTypeError, Error: &body})
}

// eventWriter writes sandbox events as NDJSON lines. Its methods are safe
// for concurrent use (the keepalive writes between events).
type eventWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex
	started bool
	exited  bool
	broken  bool
	last    time.Time // of the last line written
}

func newEventWriter(w http.ResponseWriter) *eventWriter {
	return &eventWriter{w: w, rc: http.NewResponseController(w)}
}

func (e *eventWriter) emit(ev sandbox.ExecEvent) error {
	switch ev.Type {
	case sandbox.EventStdout, sandbox.EventStderr:
		typ := ExecEventType(ev.Type)
		for data := ev.Data; len(data) > 0; {
			n := min(len(data), maxStreamChunk)
			off := ev.Offset + uint64(len(ev.Data)-len(data))
			if err := e.write(ExecEvent{Type: typ, Data: data[:n], Offset: int64(off)}); err != nil {
				return err
			}
			data = data[n:]
		}
		return nil
	case sandbox.EventExit:
		code, sig := ev.ExitCode, ev.Signal
		err := e.write(ExecEvent{Type: ExecEventTypeExit, ExitCode: &code, Signal: &sig})
		e.mu.Lock()
		e.exited = true
		e.mu.Unlock()
		return err
	default:
		return e.write(ExecEvent{Type: ExecEventType(ev.Type), ExecID: ev.ExecID})
	}
}

func (e *eventWriter) write(ev ExecEvent) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last = time.Now()
	if !e.started {
		e.started = true
		startNDJSON(e.w, e.rc) // a command may run for hours
	}
	line, err := json.Marshal(ev)
	if err == nil {
		_, err = e.w.Write(append(line, '\n'))
	}
	if err == nil {
		err = e.rc.Flush()
	}
	if err != nil {
		e.broken = true
	}
	return err
}

func (s *server) SignalExec(w http.ResponseWriter, r *http.Request, id SandboxID, execID string) {
	var req SignalRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	sig, err := parseSignal(req.Signal)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.m.Signal(r.Context(), id, execID, sig); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// parseSignal accepts "SIGTERM", "term" or "15". Numbers are Linux's, as
// they are in the guest.
func parseSignal(name string) (syscall.Signal, error) {
	name = strings.TrimSpace(name)
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > 64 {
			return 0, badRequest(CodeInvalidRequest, "signal %d out of range", n)
		}
		return syscall.Signal(n), nil
	}
	upper := strings.ToUpper(name)
	if !strings.HasPrefix(upper, "SIG") {
		upper = "SIG" + upper
	}
	if sig := unix.SignalNum(upper); sig != 0 {
		return sig, nil
	}
	return 0, badRequest(CodeInvalidRequest, "unknown signal %q", name)
}
