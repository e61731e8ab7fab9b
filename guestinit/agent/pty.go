package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/creack/pty"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Default terminal size of a PTY session that does not say.
const (
	defaultRows = 24
	defaultCols = 80
)

// eot is the terminal's end-of-file character (Ctrl-D): closing a PTY
// session's stdin sends it, since closing the master would hang up the
// terminal instead.
const eot = 0x04

// attachPTY gives cmd a new pseudo-terminal as its stdin, stdout, stderr and
// controlling terminal, in a new session. The master is the session's stdin
// and its only output stream.
func attachPTY(cmd *exec.Cmd, s *session, rows, cols uint32) (*pipeSet, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	if rows == 0 || cols == 0 {
		rows, cols = defaultRows, defaultCols
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: uint16(rows), Cols: uint16(cols)}); err != nil {
		master.Close()
		tty.Close()
		return nil, fmt.Errorf("set pty size: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// Setsid makes the process a session (and group) leader, so Signal's
	// kill(-pid) still reaches its group; Setpgid would fail after setsid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	s.stdin, s.tty = master, master
	return &pipeSet{child: []*os.File{tty}, stdout: master}, nil
}

// Resize sets a PTY session's window size.
func (e *Exec) Resize(ctx context.Context, req *agentv1.ResizeRequest) (*agentv1.Empty, error) {
	s, err := e.get(req.Id)
	if err != nil {
		return nil, toStatus(err)
	}
	if s.tty == nil {
		return nil, toStatus(fmt.Errorf("%w: session %s has no terminal", errBadArgs, req.Id))
	}
	if req.Rows == 0 || req.Cols == 0 || req.Rows > 0xffff || req.Cols > 0xffff {
		return nil, toStatus(fmt.Errorf("%w: bad size %dx%d", errBadArgs, req.Rows, req.Cols))
	}
	if _, done := s.exited(); done {
		return &agentv1.Empty{}, nil
	}
	if err := pty.Setsize(s.tty, &pty.Winsize{Rows: uint16(req.Rows), Cols: uint16(req.Cols)}); err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.Empty{}, nil
}
