package recorder

import "time"

// The payloads of the event types, stored as JSON. Their field names are
// the API's (hostd/api/openapi.yaml, schema AuditEvent).

// Exec phases: an exec has a start event and an end event.
const (
	PhaseStart = "start"
	PhaseEnd   = "end"
)

// ExecData is an exec event's payload.
type ExecData struct {
	ExecID  string    `json:"exec_id"`
	Phase   string    `json:"phase"`
	Argv    []string  `json:"argv,omitempty"`
	Cwd     string    `json:"cwd,omitempty"`
	EnvKeys []string  `json:"env_keys,omitempty"`
	Tty     bool      `json:"tty,omitempty"`
	Started time.Time `json:"started_at"`
	// TimeoutS is the timeout it runs under (0: none): it is killed at
	// Started plus this, by this hostd or the next one.
	TimeoutS int `json:"timeout_s,omitempty"`
	// Set on the end event.
	Ended      *time.Time     `json:"ended_at,omitempty"`
	DurationMS *int64         `json:"duration_ms,omitempty"`
	ExitCode   *int           `json:"exit_code,omitempty"`
	Signal     string         `json:"signal,omitempty"`
	Stdout     *OutputSummary `json:"stdout,omitempty"`
	Stderr     *OutputSummary `json:"stderr,omitempty"`
	// Error says why the end is unknown (the sandbox went first).
	Error string `json:"error,omitempty"`
}

// OutputSummary keeps one output stream's first and last bytes.
type OutputSummary struct {
	// Head is the first 64 KiB, Tail the last 64 KiB after Head (empty
	// when the stream fit in Head); the guest keeps them (Exec.Summary).
	Head       []byte `json:"head"`
	Tail       []byte `json:"tail,omitempty"`
	TotalBytes int64  `json:"total_bytes"`
	SHA256     string `json:"sha256"`
}

// File sources.
const (
	SourceGuest = "guest" // seen in the guest (fanotify)
	SourceAPI   = "api"   // done through the Files API
)

// FileData is a file event's payload.
type FileData struct {
	Op      string `json:"op"`
	Path    string `json:"path"`
	OldPath string `json:"old_path,omitempty"`
	Dir     bool   `json:"dir,omitempty"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256,omitempty"`
	Source  string `json:"source"`
	ExecID  string `json:"exec_id,omitempty"`
}

// PackageData is a package event's payload.
type PackageData struct {
	Manager    string `json:"manager"`
	Action     string `json:"action"`
	Name       string `json:"name"`
	Version    string `json:"version"`
	OldVersion string `json:"old_version,omitempty"`
	Path       string `json:"path,omitempty"`
	ExecID     string `json:"exec_id,omitempty"`
}

// NetworkData is a network event's payload (from the egress proxy).
type NetworkData struct {
	Kind     string `json:"kind"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Method   string `json:"method,omitempty"`
	Path     string `json:"path,omitempty"`
	BytesOut int64  `json:"bytes_out"`
	BytesIn  int64  `json:"bytes_in"`
	Allowed  bool   `json:"allowed"`
	Rule     string `json:"rule"`
	Status   int    `json:"status"`
	ExecID   string `json:"exec_id,omitempty"`
}

// Lifecycle actions.
const (
	ActionState    = "state"    // the sandbox changed state
	ActionSnapshot = "snapshot" // a snapshot was taken of it
	ActionFork     = "fork"     // it was forked from source_id
	ActionRestore  = "restore"  // it was restored from snapshot_id
	ActionTimeout  = "timeout"  // its timeout was set
	ActionOOMKill  = "oom_kill" // the guest killed a process for memory
)

// LifecycleData is a lifecycle event's payload.
type LifecycleData struct {
	Action     string `json:"action"`
	State      string `json:"state,omitempty"`
	Previous   string `json:"previous,omitempty"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	SourceID   string `json:"source_id,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// Process and PID name the process an oom_kill killed (in the guest).
	Process string `json:"process,omitempty"`
	PID     int    `json:"pid,omitempty"`
}

// APIData is an api event's payload: one request that changed something.
type APIData struct {
	Method     string `json:"method"`
	Route      string `json:"route"`
	Path       string `json:"path"`
	Status     int    `json:"status"`
	DurationMS int64  `json:"duration_ms"`
}

// RecorderData is a recorder event's payload.
type RecorderData struct {
	// Lost counts guest events the guest dropped before hostd read them.
	Lost uint64 `json:"lost,omitempty"`
	// WatchError says why the guest captures no file events, or that the
	// kernel dropped some.
	WatchError string `json:"watch_error,omitempty"`
}
