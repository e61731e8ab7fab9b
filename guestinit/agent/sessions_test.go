package agent

import (
	"context"
	"log/slog"
	"syscall"
	"testing"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Past maxSessions, a start forgets the oldest finished session: never a
// running one, however old, and never one newer than a finished one.
func TestSessionsForgetOldestFinished(t *testing.T) {
	e := NewExec(WaitSpawner{}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	long, err := e.Start(ctx, &agentv1.StartRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-int(long.Pid), syscall.SIGKILL) })
	var ids []string
	for range maxSessions + 2 {
		// No stdin: the command reads /dev/null's EOF, not the host.
		r, err := e.Start(ctx, &agentv1.StartRequest{Argv: []string{"cat"}, WaitMs: 30000})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Output.Exited || r.Output.ExitCode != 0 {
			t.Fatalf("cat with no stdin: %v, want an exit 0 at once", r.Output)
		}
		ids = append(ids, r.Id)
	}
	if n := len(e.sessions); n != maxSessions {
		t.Errorf("%d sessions kept, want %d", n, maxSessions)
	}
	if _, err := e.get(long.Id); err != nil {
		t.Errorf("the running session was forgotten: %v", err)
	}
	for i, id := range ids {
		_, err := e.get(id)
		if forgotten := i < 3; forgotten != (err != nil) {
			t.Errorf("session %d of %d: forgotten %v, want %v", i, len(ids), err != nil, forgotten)
		}
	}
	if len(e.order) != len(e.sessions) {
		t.Errorf("order holds %d sessions, the map %d", len(e.order), len(e.sessions))
	}
}
