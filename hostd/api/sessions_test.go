package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

func TestExecBackgroundListAttach(t *testing.T) {
	e := newTestEnv(t)
	resp := e.do(t, "POST", "/v1/sandboxes/sb1/exec", strings.NewReader(`{"cmd":["sleep","1"],"background":true}`))
	var started ExecStarted
	if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&started) != nil || started.ExecID != "e1" {
		t.Fatalf("background: got %d %+v", resp.StatusCode, started)
	}
	resp = e.do(t, "GET", "/v1/sandboxes/sb1/exec", nil)
	var list ExecSessionList
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&list) != nil || len(list.Sessions) != 1 ||
		list.Sessions[0].ExitCode == nil || list.Sessions[0].EndedAt == nil {
		t.Fatalf("list: got %d %+v", resp.StatusCode, list)
	}
	resp = e.do(t, "GET", "/v1/sandboxes/sb1/exec/e1?offset=5", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("attach: got %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		types = append(types, string(ev.Type))
		if ev.Type == ExecEventTypeStdout && string(ev.Data) != "5\n" {
			t.Errorf("attach from 5: got data %q", ev.Data)
		}
	}
	if strings.Join(types, ",") != "start,stdout,exit" {
		t.Errorf("got events %v", types)
	}
	if resp := e.do(t, "GET", "/v1/sandboxes/sb1/exec/e9", nil); resp.StatusCode != 404 {
		t.Errorf("unknown session: got %d, want 404", resp.StatusCode)
	}
	if resp := e.do(t, "GET", "/v1/sandboxes/sb1/exec/e1?offset=-1", nil); resp.StatusCode != 400 {
		t.Errorf("negative offset: got %d, want 400", resp.StatusCode)
	}
	if resp := e.doKey(t, "ab_wrong", "GET", "/v1/sandboxes/sb1/exec", nil); resp.StatusCode != 401 {
		t.Errorf("wrong key: got %d, want 401", resp.StatusCode)
	}
}

func TestPTYWebSocket(t *testing.T) {
	e := newTestEnv(t)
	// The session prints, then exits once it got the resize and the eof.
	e.m.SetAttach(func(ctx context.Context, id, execID string, offset uint64, emit func(sandbox.ExecEvent) error) error {
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte("0\n")}); err != nil {
			return err
		}
		for {
			calls := strings.Join(e.m.Calls(), ";")
			if strings.Contains(calls, "Resize 40x100") && strings.Contains(calls, `WriteStdin "" true`) &&
				strings.Contains(calls, `WriteStdin "ls\r" false`) {
				return emit(sandbox.ExecEvent{Type: sandbox.EventExit, ExitCode: 3})
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, _ := url.Parse(e.srv.URL)
	u.Scheme = "ws"
	u.Path = "/v1/sandboxes/sb1/exec/e1/pty"
	if _, resp, err := websocket.Dial(ctx, u.String(), nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("without a key: got %v, want 401", err)
	}
	conn, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + testKey}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	for _, m := range []string{`{"type":"resize","rows":40,"cols":100}`, `{"type":"eof"}`} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("ls\r")); err != nil {
		t.Fatal(err)
	}
	typ, data, err := conn.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || string(data) != "0\n" {
		t.Fatalf("output: got %v %q %v", typ, data, err)
	}
	typ, data, err = conn.Read(ctx)
	if err != nil || typ != websocket.MessageText || !strings.Contains(string(data), `"exit_code":3`) {
		t.Fatalf("exit: got %v %q %v", typ, data, err)
	}
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after exit: got %v, want a normal close", err)
	}
}

func TestPortsWithoutProxy(t *testing.T) {
	e := newTestEnv(t)
	resp := e.do(t, "GET", "/v1/sandboxes/sb1/ports/8000", nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), CodeNotSupported) {
		t.Errorf("got %d %s, want 501", resp.StatusCode, b)
	}
}

func TestKeepAlive(t *testing.T) {
	old := keepAliveEvery
	keepAliveEvery = 20 * time.Millisecond
	t.Cleanup(func() { keepAliveEvery = old })
	e := newTestEnv(t)
	// The session is silent until the client has seen a keepalive.
	seen := make(chan struct{})
	e.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"}); err != nil {
			return err
		}
		select {
		case <-seen:
		case <-ctx.Done():
			return ctx.Err()
		}
		return emit(sandbox.ExecEvent{Type: sandbox.EventExit})
	})
	resp := e.do(t, "POST", "/v1/sandboxes/sb1/exec?stream=true", strings.NewReader(`{"cmd":["idle"]}`))
	sc := bufio.NewScanner(resp.Body)
	var types []string
	for sc.Scan() {
		var ev ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == ExecEventTypeKeepalive && !slices.Contains(types, "keepalive") {
			close(seen)
		}
		types = append(types, string(ev.Type))
	}
	if len(types) < 3 || types[0] != "start" || types[1] != "keepalive" || types[len(types)-1] != "exit" {
		t.Errorf("got events %v, want start, keepalive..., exit", types)
	}
}

// TestPTYNonJSONText: a text message that is not JSON closes the socket
// with 1007 and a reason (issue 38: it was dropped without a close frame);
// an unknown control type is a warning and the session goes on.
func TestPTYNonJSONText(t *testing.T) {
	e := newTestEnv(t)
	e.m.SetAttach(func(ctx context.Context, id, execID string, offset uint64, emit func(sandbox.ExecEvent) error) error {
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, _ := url.Parse(e.srv.URL)
	u.Scheme = "ws"
	u.Path = "/v1/sandboxes/sb1/exec/e1/pty"
	conn, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + testKey}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"type":"dance"}`)); err != nil {
		t.Fatal(err)
	}
	typ, data, err := conn.Read(ctx)
	if err != nil || typ != websocket.MessageText || !strings.Contains(string(data), `"type":"warning"`) || !strings.Contains(string(data), "dance") {
		t.Fatalf("unknown type: got %v %q %v, want a warning naming it", typ, data, err)
	}
	if err := conn.Write(ctx, websocket.MessageText, []byte("ls -l")); err != nil {
		t.Fatal(err)
	}
	_, _, err = conn.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusInvalidFramePayloadData || !strings.Contains(ce.Reason, "JSON") {
		t.Fatalf("non-JSON text: got %v, want a close 1007 saying why", err)
	}
}
