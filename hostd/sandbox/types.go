// Package sandbox is hostd's sandbox manager: it creates sandboxes (overlay disk,
// VMM process, agent connection), runs commands and file operations in them
// through the guest agent, watches their VMs, and cleans up everything a
// sandbox owned when it is deleted or its VM dies.
package sandbox

import (
	"errors"
	"io/fs"
	"time"

	"github.com/agentbox/agentbox/hostd/egress"
)

// Sentinel errors. The API maps them to HTTP statuses at its boundary; file
// errors from the guest arrive as *fs.PathError wrapping a syscall.Errno, so
// errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission) and
// errors.Is(err, syscall.EISDIR) work on them.
var (
	ErrNotFound   = errors.New("sandbox: not found")
	ErrNotRunning = errors.New("sandbox: not running")
	ErrInvalid    = errors.New("sandbox: invalid request")
	// ErrBadPath rejects a guest path that is relative or contains "..".
	ErrBadPath = errors.New("sandbox: bad path")
	// ErrExecStart is returned when the command could not be started in the
	// guest (for example the binary does not exist); the sandbox stays usable.
	ErrExecStart = errors.New("sandbox: command could not start")
	// ErrDeleted ends an exec stream whose sandbox was deleted under it.
	ErrDeleted = errors.New("sandbox: deleted")
)

// State is a sandbox's lifecycle state.
type State string

// States.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateStopping State = "stopping"
	StateFailed   State = "failed"
	StateDeleted  State = "deleted"
)

// CreateOptions are the caller's choices for a new sandbox. Zero values take
// hostd's defaults.
type CreateOptions struct {
	VCPUs     int
	MemoryMiB int
	Env       map[string]string
	TimeoutS  int
	Metadata  map[string]string
	// Network is the egress policy; nil takes the default (a NIC behind
	// the proxy with nothing allowed, or none if hostd has no networking).
	Network *egress.Policy
	// SecretEnv maps env var names to secret names: the guest gets a
	// placeholder token in each, which the proxy swaps for the secret in
	// requests to hosts whose injection rules use it.
	SecretEnv map[string]string
}

// Info describes a sandbox.
type Info struct {
	ID        string
	State     State
	VCPUs     int
	MemoryMiB int
	Env       map[string]string
	TimeoutS  int
	Metadata  map[string]string
	CreatedAt time.Time
	// Error says why a failed sandbox failed.
	Error string
	// VMPID is the VMM process id while the sandbox runs.
	VMPID int
}

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	// Cmd is the argv; Cmd[0] is looked up in the guest's PATH.
	Cmd []string
	// Env is added to the sandbox's env for this command.
	Env map[string]string
	// Cwd is the working directory (default /root).
	Cwd string
	// Stdin, if set, is fed to the command and then closed.
	Stdin []byte
}

// EventType names an exec output event.
type EventType string

// Exec event types.
const (
	EventStart  EventType = "start"
	EventStdout EventType = "stdout"
	EventStderr EventType = "stderr"
	EventExit   EventType = "exit"
)

// ExecEvent is one event of a running command, delivered in order.
type ExecEvent struct {
	Type EventType
	// ExecID is set on the start event.
	ExecID string
	// Data holds output bytes for stdout and stderr events.
	Data []byte
	// ExitCode is set on the exit event (-1 when killed by a signal).
	ExitCode int
	// Signal names the signal that ended the command, if any.
	Signal string
}

// FileInfo describes a guest file.
type FileInfo struct {
	Name    string
	Path    string
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
	IsDir   bool
}
