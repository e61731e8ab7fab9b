package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

// Limits of run_command and read_output.
const (
	maxOutput      = 64 << 10
	defaultTimeout = 60 * time.Second
	maxTimeout     = 30 * time.Minute
)

type runIn struct {
	sandboxRef
	Cmd      string            `json:"cmd" jsonschema:"the command line, run by /bin/sh -c (pipes, redirections and && work)"`
	Cwd      string            `json:"cwd,omitempty" jsonschema:"working directory (default the user's home)"`
	Env      map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	TimeoutS int               `json:"timeout_s,omitempty" jsonschema:"seconds to wait for the command to finish before returning with running=true (default 60, at most 1800); the command is not killed"`
}

type readOutputIn struct {
	sandboxRef
	ExecID   string `json:"exec_id" jsonschema:"the exec_id that run_command returned"`
	Offset   int64  `json:"offset" jsonschema:"byte offset to read from: the next_offset of the previous result"`
	TimeoutS int    `json:"timeout_s,omitempty" jsonschema:"seconds to wait for the command to finish (default 60, at most 1800)"`
}

type runOut struct {
	ExecID     string `json:"exec_id" jsonschema:"the command's session: pass it to read_output"`
	Running    bool   `json:"running" jsonschema:"the command had not finished when this call returned"`
	ExitCode   *int   `json:"exit_code,omitempty" jsonschema:"the exit status, once finished (-1 if killed by a signal)"`
	Signal     string `json:"signal,omitempty" jsonschema:"the signal that killed it, if any"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Truncated  bool   `json:"truncated" jsonschema:"output was cut at 64 KiB: call read_output from next_offset for the rest"`
	NextOffset int64  `json:"next_offset" jsonschema:"the byte offset just after the output returned"`
}

func timeoutOf(s int) time.Duration {
	if s <= 0 {
		return defaultTimeout
	}
	return min(time.Duration(s)*time.Second, maxTimeout)
}

func (s *session) runCommand(ctx context.Context, _ *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, runOut, error) {
	if in.Cmd == "" {
		return nil, runOut{}, errors.New("cmd is empty")
	}
	execID, err := s.c.ExecBackground(ctx, in.SandboxID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", in.Cmd}, Cwd: in.Cwd, Env: in.Env})
	if err != nil {
		return nil, runOut{}, err
	}
	out, err := s.collect(ctx, in.SandboxID, execID, 0, timeoutOf(in.TimeoutS))
	return nil, out, err
}

func (s *session) readOutput(ctx context.Context, _ *mcp.CallToolRequest, in readOutputIn) (*mcp.CallToolResult, runOut, error) {
	if in.Offset < 0 {
		return nil, runOut{}, errors.New("offset is negative")
	}
	out, err := s.collect(ctx, in.SandboxID, in.ExecID, in.Offset, timeoutOf(in.TimeoutS))
	return nil, out, err
}

var errEnough = errors.New("enough output")

// collect reads a session's output from offset until it exits, maxOutput
// bytes were read, or wait passed.
func (s *session) collect(ctx context.Context, id, execID string, offset int64, wait time.Duration) (runOut, error) {
	out := runOut{ExecID: execID, NextOffset: offset, Running: true}
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := s.c.Attach(actx, id, execID, offset, func(ev client.Event) error {
		switch ev.Type {
		case client.ExecEventTypeStdout, client.ExecEventTypeStderr:
			buf := &stdout
			if ev.Type == client.ExecEventTypeStderr {
				buf = &stderr
			}
			data := ev.Data
			if room := maxOutput - stdout.Len() - stderr.Len(); len(data) > room {
				data = data[:max(room, 0)]
				out.Truncated = true
			}
			buf.Write(data)
			out.NextOffset = ev.Offset + int64(len(data))
			if out.Truncated {
				return errEnough
			}
		case client.ExecEventTypeExit:
			code, sig := ev.ExitStatus()
			out.Running, out.ExitCode, out.Signal = false, &code, sig
		}
		return nil
	})
	switch {
	case err == nil, errors.Is(err, errEnough):
	case actx.Err() != nil && ctx.Err() == nil:
		// Waited long enough: the command runs on.
	default:
		return out, err
	}
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	if out.Truncated {
		marker := fmt.Sprintf("\n[output truncated at %d bytes; call read_output with exec_id=%q offset=%d to read more]", maxOutput, execID, out.NextOffset)
		if stderr.Len() > 0 && stdout.Len() == 0 {
			out.Stderr += marker
		} else {
			out.Stdout += marker
		}
	}
	return out, nil
}

// capWriter keeps the first max bytes written and counts them all; past
// max it fails, which ends the transfer.
type capWriter struct {
	b   bytes.Buffer
	n   int64
	max int
}

var errCapped = errors.New("capped")

func (w *capWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if room := w.max - w.b.Len(); room < len(p) {
		w.b.Write(p[:room])
		w.n = int64(w.max) + 1
		return room, errCapped
	}
	return w.b.Write(p)
}

// parseMode reads octal permission bits ("" is 0: hostd's default).
func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o777 {
		return 0, fmt.Errorf("mode %q is not octal permission bits like 0644", s)
	}
	return fs.FileMode(n), nil
}
