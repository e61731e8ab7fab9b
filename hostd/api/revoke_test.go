package api

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// TestRevokedKeyEndsItsStreams: revoking a key refuses its next call, and
// closes its open exec stream and PTY WebSocket (each re-checks its key
// every keyRecheck; the test's 20 s ctx is only a hang guard).
func TestRevokedKeyEndsItsStreams(t *testing.T) {
	e := newTenantEnv(t, nil)
	ids := e.alphaResources(t)
	id := ids["id"]
	e.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	e.m.SetAttach(func(ctx context.Context, id, execID string, offset uint64, emit func(sandbox.ExecEvent) error) error {
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte("$ ")}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/sandboxes/"+id+"/exec?stream=true", strings.NewReader(`{"cmd":["sleep","inf"]}`))
	req.Header.Set("Authorization", "Bearer "+e.a)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"start"`) {
		t.Fatalf("stream's first event: got %q, %v", line, err)
	}

	u, _ := url.Parse(e.srv.URL)
	u.Scheme, u.Path = "ws", "/v1/sandboxes/"+id+"/exec/e1/pty"
	conn, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + e.a}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if _, data, err := conn.Read(ctx); err != nil || string(data) != "$ " {
		t.Fatalf("pty output: got %q, %v", data, err)
	}

	if st, body := e.call(t, e.admin, "DELETE", "/v1/keys/"+e.aID, ""); st != 204 {
		t.Fatalf("revoke: %d %s", st, body)
	}
	if st, _ := e.call(t, e.a, "GET", "/v1/sandboxes/"+id, ""); st != 401 {
		t.Errorf("the revoked key's next call: got %d, want 401", st)
	}

	streamDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		streamDone <- err
	}()
	_, _, err = conn.Read(ctx)
	if err == nil || ctx.Err() != nil {
		t.Errorf("pty after the revocation: got %v, want it closed before the test's deadline", err)
	}
	select {
	case <-streamDone:
	case <-ctx.Done():
		t.Fatal("the exec stream is still open after the revocation")
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("timed out")
	}
}
