//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// ticker prints "line N" every 100 ms for 5 s.
var ticker = []string{"sh", "-c", "for i in $(seq 1 50); do echo line $i; sleep 0.1; done"}

func tickerOutput() string {
	var b strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// collect attaches to a session from offset and returns its output and exit.
func collect(t *testing.T, c *client.Client, id, execID string, offset int64) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := -100
	next := offset
	err := c.Attach(ctx, id, execID, offset, func(ev client.Event) error {
		switch ev.Type {
		case client.ExecEventTypeStdout, client.ExecEventTypeStderr:
			if ev.Offset != next {
				return fmt.Errorf("event at offset %d, want %d", ev.Offset, next)
			}
			out.Write(ev.Data)
			next = ev.End()
		case client.ExecEventTypeExit:
			code, _ = ev.ExitStatus()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("attach %s from %d: %v", execID, offset, err)
	}
	return out.String(), code
}

// checkReattach cuts a streamed exec after 1 s and reads the rest back.
func checkReattach(t *testing.T, c *client.Client, id string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		execID string
		seen   bytes.Buffer
		last   int64
	)
	time.AfterFunc(time.Second, cancel) // the client goes away mid-stream
	err := c.ExecStream(ctx, id, client.ExecRequest{Cmd: ticker}, func(ev client.Event) error {
		switch ev.Type {
		case client.ExecEventTypeStart:
			execID = ev.ExecID
		case client.ExecEventTypeStdout:
			seen.Write(ev.Data)
			last = ev.End()
		case client.ExecEventTypeExit:
			return errors.New("the stream was not cut before the command ended")
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stream: got %v, want it cut by the client", err)
	}
	if execID == "" {
		t.Fatal("no start event before the cut")
	}
	want := tickerOutput()
	if got, code := collect(t, c, id, execID, 0); got != want || code != 0 {
		t.Errorf("from offset 0: got %q exit %d, want all 50 lines, exit 0", got, code)
	}
	rest, code := collect(t, c, id, execID, last)
	if seen.String()+rest != want || code != 0 {
		t.Errorf("seen %q + from offset %d %q, want all 50 lines in order", seen.String(), last, rest)
	}
	// The session is listed as exited 0.
	list, err := c.ListExecs(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list {
		if s.ExecID == execID {
			found = true
			if s.Running || s.ExitCode == nil || *s.ExitCode != 0 || s.EndedAt == nil {
				t.Errorf("listed as %+v, want exited 0", s)
			}
		}
	}
	if !found {
		t.Errorf("session %s not in %+v", execID, list)
	}
}

func checkBackground(t *testing.T, c *client.Client, id string) {
	ctx := context.Background()
	execID, err := c.ExecBackground(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", "read x; echo got $x; exit 7"}, Stdin: "it\n"})
	if err != nil {
		t.Fatal(err)
	}
	if out, code := collect(t, c, id, execID, 0); out != "got it\n" || code != 7 {
		t.Errorf("got %q exit %d, want \"got it\" exit 7", out, code)
	}
	if err := c.Attach(ctx, id, "nope", 0, func(client.Event) error { return nil }); !isStatus(err, 404) {
		t.Errorf("attach to an unknown session: got %v, want 404", err)
	}
}

func isStatus(err error, status int) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == status
}

// term reads a PTY's output and waits for strings in it.
type term struct {
	p    *client.PTY
	mu   sync.Mutex
	out  bytes.Buffer
	more chan struct{}
	done chan struct{}
}

func newTerm(p *client.PTY) *term {
	tm := &term{p: p, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		buf := make([]byte, 4096)
		for {
			n, err := p.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			select {
			case tm.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return tm
}

// waitFor waits until the output holds s, and returns the output.
func (tm *term) waitFor(t *testing.T, s string) string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		tm.mu.Lock()
		out := tm.out.String()
		tm.mu.Unlock()
		if strings.Contains(out, s) {
			return out
		}
		select {
		case <-tm.more:
		case <-tm.done:
			t.Fatalf("terminal closed before %q appeared; output:\n%s", s, out)
		case <-deadline:
			t.Fatalf("%q did not appear; output:\n%s", s, out)
		}
	}
}

func (tm *term) send(t *testing.T, s string) {
	t.Helper()
	if _, err := tm.p.Write([]byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// checkPTY drives bash on a terminal: resize, then stty size; Ctrl-C
// interrupts sleep; exit ends the session with its code.
func checkPTY(t *testing.T, c *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	execID, err := c.ExecBackground(ctx, id, client.ExecRequest{Cmd: []string{"bash", "--norc", "-i"}, Tty: true, Rows: 24, Cols: 80,
		Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.PTY(ctx, id, execID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tm := newTerm(p)
	tm.send(t, "stty size; echo size-$((6*7))\r")
	tm.waitFor(t, "24 80")
	if err := p.Resize(40, 132); err != nil {
		t.Fatal(err)
	}
	tm.send(t, "stty size; echo resized-$((6*7))\r")
	out := tm.waitFor(t, "resized-42")
	if !strings.Contains(out, "40 132") {
		t.Errorf("after resize to 40x132, stty size printed:\n%s", out)
	}
	// The marker is printed by the foreground job itself, so ^C comes
	// once the job runs (the echo of the typed line reads sl""eeping).
	tm.send(t, "sh -c 'echo sl\"\"eeping; exec sleep 600'\r")
	tm.waitFor(t, "sleeping")
	tm.send(t, "\x03")
	// An interrupted job ends the line; the next one reads its status.
	tm.send(t, "echo status-$?\r")
	tm.waitFor(t, "status-130")
	tm.send(t, "exit 3\r")
	<-tm.done
	if code, _, ok := p.Exit(); !ok || code != 3 {
		t.Errorf("exit: got %d (ok %v), want 3", code, ok)
	}
}
