package api

import (
	"context"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// SessionManager is what the durable-exec handlers need of the manager:
// exec sessions that outlive their client, read back from any offset.
type SessionManager interface {
	// StartExec starts a command and returns its session id at once.
	StartExec(ctx context.Context, id string, req sandbox.ExecRequest) (string, error)
	// Attach emits a session's output from offset, then its exit.
	Attach(ctx context.Context, id, execID string, offset uint64, emit func(sandbox.ExecEvent) error) error
	Sessions(ctx context.Context, id string) ([]sandbox.Session, error)
	WriteStdin(ctx context.Context, id, execID string, data []byte, close bool) error
	Resize(ctx context.Context, id, execID string, rows, cols int) error
}

var _ SessionManager = sandbox.Service{}

// keepAliveEvery is how often an idle NDJSON stream gets a keepalive line,
// so that proxies between hostd and the client do not cut it. A variable
// for tests.
var keepAliveEvery = 20 * time.Second

// keepAlive writes a keepalive line whenever the stream has been idle for
// keepAliveEvery, once it has started. Call the returned func to stop.
func (e *eventWriter) keepAlive() (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(keepAliveEvery / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			e.mu.Lock()
			idle := e.started && !e.exited && !e.broken && time.Since(e.last) >= keepAliveEvery
			e.mu.Unlock()
			if idle && e.write(ExecEvent{Type: ExecEventTypeKeepalive}) != nil {
				return
			}
		}
	}()
	return func() { close(done) }
}

// execBackground starts a command and answers 202 with its session id.
func (s *server) execBackground(w http.ResponseWriter, r *http.Request, id string, req sandbox.ExecRequest) {
	execID, err := s.m.StartExec(r.Context(), id, req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, ExecStarted{ExecID: execID})
}

func (s *server) ListExecs(w http.ResponseWriter, r *http.Request, id SandboxID) {
	list, err := s.m.Sessions(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := ExecSessionList{Sessions: make([]ExecSession, 0, len(list))}
	for _, ss := range list {
		es := ExecSession{ExecID: ss.ID, Cmd: ss.Cmd, PID: ss.PID, Running: ss.Running, Tty: ss.Tty, StartedAt: ss.Started}
		if es.Cmd == nil {
			es.Cmd = []string{}
		}
		if !ss.Running {
			code, ended := ss.ExitCode, ss.Ended
			es.ExitCode, es.Signal, es.EndedAt = &code, ss.Signal, &ended
		}
		out.Sessions = append(out.Sessions, es)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) AttachExec(w http.ResponseWriter, r *http.Request, id SandboxID, execID ExecID, params AttachExecParams) {
	if params.Offset < 0 {
		s.writeError(w, r, badRequest(CodeInvalidParam, "offset must not be negative"))
		return
	}
	if err := s.findSession(r.Context(), id, execID); err != nil {
		s.writeError(w, r, err)
		return
	}
	ew := newEventWriter(w)
	defer ew.keepAlive()()
	err := ew.emit(sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: execID})
	if err == nil {
		err = s.m.Attach(r.Context(), id, execID, uint64(params.Offset), ew.emit)
	}
	s.endStream(w, r, id, ew, err)
}

// findSession returns nil if sandbox id has session execID, so that an
// unknown one is answered 404 before a stream starts.
func (s *server) findSession(ctx context.Context, id, execID string) error {
	list, err := s.m.Sessions(ctx, id)
	if err != nil {
		return err
	}
	for _, ss := range list {
		if ss.ID == execID {
			return nil
		}
	}
	return &apiError{status: http.StatusNotFound, code: CodeSandboxNotFound, msg: "no exec session " + execID}
}
