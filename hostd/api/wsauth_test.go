package api

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// TestPTYSubprotocolKey: a browser's WebSocket offers its key as the
// agentbox.bearer.<key> subprotocol; hostd accepts it on the pty route,
// answers agentbox.pty, and refuses a wrong key with 401.
func TestPTYSubprotocolKey(t *testing.T) {
	e := newTestEnv(t)
	e.m.SetAttach(func(ctx context.Context, id, execID string, offset uint64, emit func(sandbox.ExecEvent) error) error {
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte("hi\n")}); err != nil {
			return err
		}
		return emit(sandbox.ExecEvent{Type: sandbox.EventExit})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, _ := url.Parse(e.srv.URL)
	u.Scheme = "ws"
	u.Path = "/v1/sandboxes/sb1/exec/e1/pty"
	if _, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{Subprotocols: []string{ptySubprotocol, bearerSubprotocol + "ab_wrong"}}); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("with a wrong key: got %v, want 401", err)
	}
	conn, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{Subprotocols: []string{ptySubprotocol, bearerSubprotocol + testKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if got := conn.Subprotocol(); got != ptySubprotocol {
		t.Errorf("subprotocol: got %q, want %q", got, ptySubprotocol)
	}
	if typ, data, err := conn.Read(ctx); err != nil || typ != websocket.MessageBinary || string(data) != "hi\n" {
		t.Fatalf("output: got %v %q %v", typ, data, err)
	}
	// Another route does not read a key from a subprotocol.
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/sandboxes", nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Protocol", bearerSubprotocol+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("list with a subprotocol key: got %d, want 401", resp.StatusCode)
	}
}
