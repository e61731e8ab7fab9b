// Package sandbox is hostd's sandbox manager: it creates sandboxes (overlay
// disk, VMM process, agent connection), restores and forks them through the
// snapshot engine (package snapshot), watches their VMs, and cleans up
// everything a sandbox owned when it is deleted or its VM dies.
//
// A create reads top to bottom in create.go. Making a VM from a snapshot
// (a fork's fan-out, a copy's restore, the wake, the base snapshots'
// catalogue) is the snapshot engine's; this package hands it each copy's
// config, network and cgroup, and keeps the records.
//
// The types, one concern each:
//
//   - Manager: the lifecycle core (create, delete, pause, resume, fork,
//     snapshot, limits, recovery at start, Close).
//   - Execs, Files, Templates, Snapshots: the exec sessions, the guest
//     files, the templates with their warm pools and the snapshots' API,
//     each holding only what it uses; Service puts them side by side for
//     hostd's API.
//   - entry and registry (registry.go): the one in-memory record per
//     sandbox, from create to delete, across its VMs: its runningVM, its
//     network attachment, usage meter, TTL timer, exec timeouts and the
//     recorder's state.
//   - runningVM (runningvm.go): one VM of a sandbox and its agent
//     connection.
//   - netAttachments (netattach.go), recorderFeed (recorderfeed.go),
//     limitPolicy (limits.go), reaper (reap.go), poolRegistry and warmPools
//     (warmpools.go): the sandboxes' networks, what the flight recorder is
//     fed, limit resolution and each sandbox's stored limits, the orphan
//     reaper, the warm pools and their filling and claiming.
//   - vmmPlacer (vmmplacer.go) and cgroupLedger (cgroupledger.go): where a
//     VMM process goes (user, cgroup, limits) and its identity on disk,
//     found again by a later hostd; the cgroups this hostd holds.
//   - vmmJail (vmmjail.go): the VMMs' unprivileged users.
//   - ttls, execTimeouts and takeover: the sandboxes' TTL timers, the
//     execs' timeouts, and the execs an earlier hostd left running.
//
// Lock order (outer first). runningVM.op serializes the lifecycle
// operations of one VM (snapshot, pause, delete), and entry.resume the
// resumes of one sandbox; each is taken before any other lock of that
// sandbox and held across the operation. guestCursor.mu is held while a
// batch of guest events is recorded, and may take the locks below. Every
// other lock is a leaf, held only to read or write its fields, never while
// calling out or taking another lock: registry.mu, entry.mu, execLog.mu,
// poolRegistry.mu (released before any pool.mu), pool.mu, ttl.mu, meter.mu,
// snapshot.BaseCatalog's and Manager.bgMu. runningVM.mu is a leaf too, but
// is held across the agent dial so that one connection is made at a time.
//
// Background work (VM and idle watchers, guest event polls, exec waits, pool
// refills, timers) runs through Manager.spawn, and Close waits for it.
package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/mounts"
	"github.com/agentbox/agentbox/snapshot"
)

// Sentinel errors. The API maps them to HTTP statuses at its boundary; file
// errors from the guest arrive as *fs.PathError wrapping a syscall.Errno, so
// errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission) and
// errors.Is(err, syscall.EISDIR) work on them.
var (
	ErrNotFound = errors.New("sandbox: not found")
	// ErrSnapshotNotFound names a snapshot that does not exist; it is also
	// an ErrNotFound.
	ErrSnapshotNotFound = fmt.Errorf("%w (snapshot)", ErrNotFound)
	// ErrTemplateNotFound names a template that does not exist; it is also
	// an ErrNotFound.
	ErrTemplateNotFound = fmt.Errorf("%w (template)", ErrNotFound)
	ErrNotRunning       = errors.New("sandbox: not running")
	ErrInvalid          = errors.New("sandbox: invalid request")
	// ErrBadPath rejects a guest path that is relative or contains "..".
	ErrBadPath = errors.New("sandbox: bad path")
	// ErrExecStart is returned when the command could not be started in the
	// guest (for example the binary does not exist); the sandbox stays usable.
	ErrExecStart = errors.New("sandbox: command could not start")
	// ErrDeleted ends an exec stream whose sandbox was deleted under it.
	ErrDeleted = errors.New("sandbox: deleted")
	// ErrInUse refuses to delete a snapshot that something still uses.
	ErrInUse = snapshot.ErrInUse
	// ErrCorrupt refuses a snapshot whose files fail their checksums.
	ErrCorrupt = snapshot.ErrCorrupt
	// ErrPaused is returned for calls that need a running sandbox while it
	// is paused (resume it first).
	ErrPaused = errors.New("sandbox: paused")
	// ErrAgentLost is returned when the guest agent's connection closed
	// while its VM runs on (the guest killed or replaced the agent).
	ErrAgentLost = errors.New("sandbox: the guest agent's connection closed")
	// ErrNotDurable refuses a release of a sandbox that is not paused and
	// durable in the snapshot store: releasing it would lose it.
	ErrNotDurable = errors.New("sandbox: not paused and durable in the snapshot store")
	// ErrStoreUnavailable is a snapshot store that cannot be reached: a
	// pause fails (the sandbox runs on) or a resume cannot fetch.
	ErrStoreUnavailable = errors.New("sandbox: snapshot store unavailable")
)

// State is a sandbox's lifecycle state.
type State string

// States.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateStopping State = "stopping"
	StatePausing  State = "pausing"
	StatePaused   State = "paused"
	StateResuming State = "resuming"
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
	// Snapshot or Template, if set, start the sandbox from that snapshot
	// (its vcpus and memory win) instead of booting the base image.
	Snapshot string
	Template string
	// Boot is BootAuto (a create with neither restores the built-in base
	// snapshot, base.go) or BootCold (boot the base image).
	Boot string
	// BaseImage, if set, is the read-only qcow2 base a booted sandbox's
	// disk overlays instead of hostd's base image (a template built from
	// an OCI image boots its own base once; its snapshot's layers then
	// keep that base as their backing file). Set by hostd, never by API
	// callers.
	BaseImage string
	// Kernel and Initramfs, if set, boot a booted sandbox instead of
	// hostd's (a template with its own kernel boots it once; restores of
	// its snapshots resume that boot's memory). Set by hostd, never by
	// API callers.
	Kernel, Initramfs string
	// Limits are the sandbox's resource limits and lifecycle options.
	Limits Limits
	// Caller names the API key that asked, for its maximums ("" = none).
	Caller string
	// Mounts are external data the guest sees as directories (hostd/mounts):
	// checked against the operator's policy before anything is made, and
	// served again after every restore, fork and resume.
	Mounts []mounts.Spec

	// staged, set by Fork only, starts a copy from the fork's snapshot
	// while it is being captured (snapshot.Fork).
	staged *snapshot.Gate
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
	// SnapshotID is the snapshot the sandbox's disk overlays ("" for the
	// base image).
	SnapshotID string
	// Limits are the sandbox's resource limits; Deadline is when its
	// timeout ends (zero without one).
	Limits   Limits
	Deadline time.Time
	// Durable says its paused state is in the snapshot store (a hostd with
	// --snapshot-store): DurableManifest is the manifest a resume returns
	// to, DurableAt when it became durable.
	Durable         bool
	DurableManifest string
	DurableAt       time.Time
}

// ForkOptions are the choices of a fork.
type ForkOptions struct {
	// Count is how many copies (1..64).
	Count int
	// Caller names the API key that asked: its maximums bound the copies
	// as they bound a create (CreateOptions.Caller).
	Caller string
}

// SnapshotOptions are the choices of a snapshot capture.
type SnapshotOptions struct {
	// StayPaused leaves the sandbox paused after the capture.
	StayPaused bool
	// Kind is recorded: snapshot.KindSnapshot (default), KindFork or
	// KindStep.
	Kind string
	// CacheKey is recorded for template build steps.
	CacheKey string
	// Env is added to the env, Cwd replaces the default working
	// directory and User the default user of execs ("root", a name or
	// uid[:gid]), of sandboxes started from the snapshot.
	Env  map[string]string
	Cwd  string
	User string
}

// SnapshotInfo describes a snapshot and its lineage.
type SnapshotInfo = snapshot.Info

// TemplateInfo describes a template: a named snapshot with a warm pool.
type TemplateInfo struct {
	Name       string
	SnapshotID string
	PoolSize   int
	// PoolReady is how many pool sandboxes are restored and waiting.
	PoolReady int
	CreatedAt time.Time
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
	// TimeoutS kills the command after that many seconds (0 = the
	// sandbox's exec_timeout_s; negative = never, for hostd's own use).
	TimeoutS int
	// Tty runs the command on a pseudo-terminal of Rows x Cols (0: 24x80),
	// its stdin open for WriteStdin; its output is all stdout.
	Tty        bool
	Rows, Cols int
	// User runs the command as that user ("root", a name or uid[:gid],
	// resolved in the guest) instead of the sandbox's default user (its
	// template's, else root).
	User string
	// Collect says the caller wants the result, not the events as they
	// come: Exec may then start the command and wait for its first output
	// or exit in one call to the guest, so the start event can come late.
	Collect bool
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
	// Offset is the position of Data's first byte in the session's output
	// log (stdout and stderr combined); attach from it to read on.
	Offset uint64
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
