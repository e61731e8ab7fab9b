package agent

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

func TestParseStat(t *testing.T) {
	ppid, pgrp, ok := parseStat([]byte("123 (a) b) c) S 45 67 67 0 -1 4194560"))
	if !ok || ppid != 45 || pgrp != 67 {
		t.Errorf("got %d %d %v, want 45 67 true", ppid, pgrp, ok)
	}
	if _, _, ok := parseStat([]byte("123 (x")); ok {
		t.Error("got ok for a truncated stat")
	}
}

func TestSessionOf(t *testing.T) {
	flushed := make(chan struct{}, 1)
	e := NewExec(WaitSpawner{}, slog.New(slog.NewTextHandler(io.Discard, nil)), BeforeExit(func() { flushed <- struct{}{} }))
	s, err := e.start(&agentv1.StartRequest{Shell: "sleep 0.2 & wait"})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.SessionOf(s.pid); got != s.id {
		t.Errorf("leader: got %q, want %q", got, s.id)
	}
	if got := e.SessionOf(os.Getpid()); got != "" {
		t.Errorf("unrelated process: got %q, want none", got)
	}
	// A gone process goes to the only running session.
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if got := e.SessionOf(c.Process.Pid); got != s.id {
		t.Errorf("gone process: got %q, want %q", got, s.id)
	}
	select {
	case <-flushed:
	case <-time.After(5 * time.Second):
		t.Fatal("BeforeExit did not run")
	}
	<-s.done
	if got := e.SessionOf(s.pid); got != "" {
		t.Errorf("after exit: got %q, want none", got)
	}
}
