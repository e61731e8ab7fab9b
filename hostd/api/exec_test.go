package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

func TestExecCollected(t *testing.T) {
	env := newTestEnv(t)
	env.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		if got := string(req.Stdin); got != "input" {
			t.Errorf("stdin: got %q, want input", got)
		}
		return emitAll(emit,
			sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e7"},
			sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte("hi\n")},
			sandbox.ExecEvent{Type: sandbox.EventStderr, Data: []byte("oops")},
			sandbox.ExecEvent{Type: sandbox.EventExit, ExitCode: 3},
		)
	})
	resp := env.do(t, "POST", "/v1/sandboxes/sb1/exec", strings.NewReader(`{"cmd":["sh","-c","x"],"stdin":"input"}`))
	if resp.StatusCode != 200 {
		t.Fatalf("status: got %d, want 200", resp.StatusCode)
	}
	var res ExecResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	want := ExecResult{ExecID: "e7", Stdout: "hi\n", Stderr: "oops", ExitCode: 3}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("result: got %+v, want %+v", res, want)
	}
}

// TestExecCollectedNotUTF8: a collected stream that is not valid UTF-8
// (here a byte 0xff, and a rune whose bytes come in two events) keeps its
// text with U+FFFD and gives its exact bytes in *_b64 (issue 38 #11); a
// valid one has no *_b64.
func TestExecCollectedNotUTF8(t *testing.T) {
	env := newTestEnv(t)
	env.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		return emitAll(emit,
			sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e7"},
			sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte("\x00bin\xff\xe2\x82")},
			sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte("\xac")},
			sandbox.ExecEvent{Type: sandbox.EventStderr, Data: []byte("caf\xc3")},
			sandbox.ExecEvent{Type: sandbox.EventStderr, Data: []byte("\xa9")},
			sandbox.ExecEvent{Type: sandbox.EventExit},
		)
	})
	resp := env.do(t, "POST", "/v1/sandboxes/sb1/exec", strings.NewReader(`{"cmd":["cat","/bin/true"]}`))
	if resp.StatusCode != 200 {
		t.Fatalf("status: got %d, want 200", resp.StatusCode)
	}
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"exec_id": "e7", "exit_code": float64(0),
		"stdout": "\x00bin\ufffd\u20ac", "stdout_b64": "AGJpbv/igqw=", "stderr": "caf\u00e9"}
	if !reflect.DeepEqual(raw, want) {
		t.Errorf("result: got %v, want %v", raw, want)
	}
}

func TestExecCollectedCap(t *testing.T) {
	env := newTestEnv(t)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	env.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		evs := []sandbox.ExecEvent{{Type: sandbox.EventStart, ExecID: "e1"}}
		for range maxCollected/len(chunk) + 3 {
			evs = append(evs, sandbox.ExecEvent{Type: sandbox.EventStdout, Data: chunk})
		}
		evs = append(evs,
			sandbox.ExecEvent{Type: sandbox.EventStderr, Data: []byte("small")},
			sandbox.ExecEvent{Type: sandbox.EventExit})
		return emitAll(emit, evs...)
	})
	resp := env.do(t, "POST", "/v1/sandboxes/sb1/exec", strings.NewReader(`{"cmd":["yes"]}`))
	var res ExecResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != maxCollected {
		t.Errorf("stdout length: got %d, want %d", len(res.Stdout), maxCollected)
	}
	if res.Stderr != "small" || !res.Truncated {
		t.Errorf("stderr, truncated: got %q, %v, want small, true", res.Stderr, res.Truncated)
	}
}

// readEvent reads one NDJSON line.
func readEvent(t *testing.T, br *bufio.Reader) (ExecEvent, string) {
	t.Helper()
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("read event: %v (got %q)", err, line)
	}
	var ev ExecEvent
	if err := json.Unmarshal([]byte(line), &ev); err != nil {
		t.Fatalf("decode %q: %v", line, err)
	}
	return ev, strings.TrimSpace(line)
}

// TestExecStreamFlushes checks order and that each event reaches the client
// before the next one happens: the fake waits for the test to read each line.
func TestExecStreamFlushes(t *testing.T) {
	env := newTestEnv(t)
	env.srv.Client().Timeout = 10 * time.Second // an unflushed event would block forever
	read := make(chan struct{})
	env.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		for _, ev := range []sandbox.ExecEvent{
			{Type: sandbox.EventStart, ExecID: "e1"},
			{Type: sandbox.EventStdout, Data: []byte("hi\n")},
			{Type: sandbox.EventStderr, Data: []byte{0xff, 0}},
			{Type: sandbox.EventExit, ExitCode: 0},
		} {
			if err := emit(ev); err != nil {
				return err
			}
			select {
			case <-read:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	resp := env.do(t, "POST", "/v1/sandboxes/sb1/exec?stream=true", strings.NewReader(`{"cmd":["echo","hi"]}`))
	if got := resp.Header.Get("Content-Type"); got != "application/x-ndjson" {
		t.Fatalf("Content-Type: got %q, want application/x-ndjson", got)
	}
	br := bufio.NewReader(resp.Body)
	want := []string{
		`{"exec_id":"e1","type":"start"}`,
		`{"data":"aGkK","type":"stdout"}`,
		`{"data":"/wA=","type":"stderr"}`,
		`{"exit_code":0,"signal":"","type":"exit"}`,
	}
	for i, w := range want {
		_, line := readEvent(t, br)
		if line != w {
			t.Errorf("event %d: got %s, want %s", i, line, w)
		}
		read <- struct{}{}
	}
	if rest, _ := br.ReadString('\n'); rest != "" {
		t.Errorf("after exit: got %q, want end of stream", rest)
	}
}

func TestExecStreamEndsWithError(t *testing.T) {
	env := newTestEnv(t)
	env.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		if err := emitAll(emit,
			sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"},
			sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte("partial")},
		); err != nil {
			return err
		}
		return fmt.Errorf("exec e1: %w", sandbox.ErrDeleted)
	})
	resp := env.do(t, "POST", "/v1/sandboxes/sb1/exec?stream=true", strings.NewReader(`{"cmd":["sleep","100"]}`))
	if resp.StatusCode != 200 {
		t.Fatalf("status: got %d, want 200", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	var types []string
	var last ExecEvent
	for {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 || err != nil {
			break
		}
		if err := json.Unmarshal(line, &last); err != nil {
			t.Fatal(err)
		}
		types = append(types, string(last.Type))
	}
	if got, want := strings.Join(types, ","), "start,stdout,error"; got != want {
		t.Fatalf("events: got %v, want %v", got, want)
	}
	if last.Error == nil || last.Error.Code != CodeSandboxDeleted {
		t.Errorf("error event: got %+v, want code %s", last.Error, CodeSandboxDeleted)
	}
}

func TestExecStreamErrorBeforeStart(t *testing.T) {
	env := newTestEnv(t)
	env.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		return fmt.Errorf("exec %q: %w", req.Cmd[0], sandbox.ErrExecStart)
	})
	for _, target := range []string{"/v1/sandboxes/sb1/exec?stream=true", "/v1/sandboxes/sb1/exec"} {
		t.Run(target, func(t *testing.T) {
			resp := env.do(t, "POST", target, strings.NewReader(`{"cmd":["nope"]}`))
			wantError(t, resp, http.StatusUnprocessableEntity, CodeExecFailed)
		})
	}
	t.Run("unknown sandbox", func(t *testing.T) {
		resp := env.do(t, "POST", "/v1/sandboxes/sb9/exec?stream=true", strings.NewReader(`{"cmd":["ls"]}`))
		wantError(t, resp, http.StatusNotFound, CodeSandboxNotFound)
	})
}

func TestExecStreamSplitsLargeChunks(t *testing.T) {
	env := newTestEnv(t)
	big := bytes.Repeat([]byte("0123456789"), maxStreamChunk/4)
	env.m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		return emitAll(emit,
			sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"},
			sandbox.ExecEvent{Type: sandbox.EventStdout, Data: big},
			sandbox.ExecEvent{Type: sandbox.EventExit})
	})
	resp := env.do(t, "POST", "/v1/sandboxes/sb1/exec?stream=true", strings.NewReader(`{"cmd":["cat"]}`))
	br := bufio.NewReader(resp.Body)
	var got []byte
	chunks := 0
	for {
		ev, _ := readEvent(t, br)
		if ev.Type == ExecEventTypeExit {
			break
		}
		if ev.Type == ExecEventTypeStdout {
			if len(ev.Data) > maxStreamChunk {
				t.Errorf("chunk size: got %d, want <= %d", len(ev.Data), maxStreamChunk)
			}
			got = append(got, ev.Data...)
			chunks++
		}
	}
	if !bytes.Equal(got, big) || chunks != 3 {
		t.Errorf("stdout: got %d bytes in %d chunks, want %d bytes in 3", len(got), chunks, len(big))
	}
}

func TestSignal(t *testing.T) {
	env := newTestEnv(t)
	resp := env.do(t, "POST", "/v1/sandboxes/sb1/exec/e1/signal", strings.NewReader(`{"signal":"SIGTERM"}`))
	if resp.StatusCode != 204 {
		t.Fatalf("status: got %d, want 204", resp.StatusCode)
	}
	if sigs := env.m.Signals(); len(sigs) != 1 || sigs[0] != syscall.SIGTERM {
		t.Errorf("signals: got %v, want [SIGTERM]", sigs)
	}
}

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in   string
		want syscall.Signal
		ok   bool
	}{
		{"SIGTERM", syscall.SIGTERM, true},
		{"term", syscall.SIGTERM, true},
		{"KILL", syscall.SIGKILL, true},
		{"9", syscall.SIGKILL, true},
		{"sigint", syscall.SIGINT, true},
		{"0", 0, false},
		{"65", 0, false},
		{"SIGNOPE", 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSignal(tc.in)
			if got != tc.want || (err == nil) != tc.ok {
				t.Errorf("parseSignal(%q): got %v, %v, want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}
