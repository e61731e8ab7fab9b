// Package blueprinttest serves hostd's real API handler over a fake
// manager that, unlike apitest's, keeps snapshots (with their kind, cache
// key and lineage) and templates, and records every command it runs: for
// tests of template builds and of the CLI's snapshot and template commands.
//
// Its exec understands sh -c scripts of one word and an argument: "exit N"
// exits N, "echo TEXT" and "warn TEXT" write TEXT and a newline to stdout
// and stderr, "printf TEXT" writes TEXT alone to stdout; every other
// command exits 0 silently.
package blueprinttest

import (
	"context"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// Key is the API key the host accepts.
const Key = "ab_blueprint-test"

// Host is a fake hostd. The embedded apitest.Manager holds the sandboxes
// and guest files (one filesystem shared by all sandboxes).
type Host struct {
	*apitest.Manager
	// URL is the server's address.
	URL string

	mu        sync.Mutex
	snaps     map[string]sandbox.SnapshotInfo
	templates map[string]sandbox.TemplateInfo
	from      map[string]string // sandbox id -> snapshot it started from
	corrupt   map[string]bool
	creates   []sandbox.CreateOptions
	execs     []Exec
	seq       int
}

// Exec is a command the host ran.
type Exec struct {
	Sandbox string
	Req     sandbox.ExecRequest
}

// Script is the command's sh -c script, or its argv joined by spaces.
func (e Exec) Script() string {
	if len(e.Req.Cmd) >= 3 && e.Req.Cmd[0] == "sh" && e.Req.Cmd[1] == "-c" {
		return e.Req.Cmd[2]
	}
	return strings.Join(e.Req.Cmd, " ")
}

var _ api.Manager = (*Host)(nil)

// New starts a host, closed when the test ends. builds, if given, makes
// the builder of its POST /v1/templates/build from the host's URL.
func New(t testing.TB, builds ...func(self func() string) api.TemplateBuilds) *Host {
	t.Helper()
	h := &Host{
		Manager:   apitest.NewManager(),
		snaps:     map[string]sandbox.SnapshotInfo{},
		templates: map[string]sandbox.TemplateInfo{},
		from:      map[string]string{},
		corrupt:   map[string]bool{},
	}
	h.SetExec(h.exec)
	opts := api.Options{Manager: h, Auth: auth.New(apitest.NewKeys(auth.Hash(Key))), BuildDir: t.TempDir()}
	for _, b := range builds {
		opts.Builds = b(func() string { return h.URL })
	}
	srv := httptest.NewServer(api.New(opts))
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

func (h *Host) exec(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
	h.mu.Lock()
	h.execs = append(h.execs, Exec{Sandbox: id, Req: req})
	h.mu.Unlock()
	e := Exec{Req: req}
	verb, arg, _ := strings.Cut(e.Script(), " ")
	evs := []sandbox.ExecEvent{{Type: sandbox.EventStart, ExecID: "e1"}}
	exit := sandbox.ExecEvent{Type: sandbox.EventExit}
	switch verb {
	case "exit":
		exit.ExitCode, _ = strconv.Atoi(arg)
	case "echo":
		evs = append(evs, sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte(arg + "\n")})
	case "printf":
		evs = append(evs, sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte(arg)})
	case "warn":
		evs = append(evs, sandbox.ExecEvent{Type: sandbox.EventStderr, Data: []byte(arg + "\n")})
	}
	return apitest.EmitAll(emit, append(evs, exit)...)
}

// Execs returns the commands run so far, in order.
func (h *Host) Execs() []Exec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.execs)
}

// Creates returns the options of every sandbox created so far.
func (h *Host) Creates() []sandbox.CreateOptions {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.creates)
}

// Reset forgets the recorded creates, execs and calls (not the state).
func (h *Host) Reset() {
	h.mu.Lock()
	h.creates, h.execs = nil, nil
	h.mu.Unlock()
	h.ResetCalls()
}

// Corrupt makes every later start from snapshot id fail as corrupt.
func (h *Host) Corrupt(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.corrupt[id] = true
}

// Create starts a sandbox, from a known snapshot or template if asked.
func (h *Host) Create(ctx context.Context, opts sandbox.CreateOptions) (sandbox.Info, error) {
	h.mu.Lock()
	h.creates = append(h.creates, opts)
	snap := opts.Snapshot
	if t, ok := h.templates[opts.Template]; ok {
		snap = t.SnapshotID
	}
	_, known := h.snaps[snap]
	corrupt := h.corrupt[snap]
	h.mu.Unlock()
	switch {
	case corrupt:
		return sandbox.Info{}, fmt.Errorf("%w: snapshot %s", sandbox.ErrCorrupt, snap)
	case opts.Template != "" && snap == "":
		return sandbox.Info{}, fmt.Errorf("%w: %s", sandbox.ErrTemplateNotFound, opts.Template)
	case snap != "" && !known:
		return sandbox.Info{}, fmt.Errorf("%w: snapshot %s", sandbox.ErrNotFound, snap)
	}
	info, err := h.Manager.Create(ctx, opts)
	if err != nil {
		return info, err
	}
	info.SnapshotID = snap
	h.mu.Lock()
	h.from[info.ID] = snap
	h.mu.Unlock()
	return info, nil
}

// Snapshot records a snapshot of a known sandbox.
func (h *Host) Snapshot(ctx context.Context, id string, opts sandbox.SnapshotOptions) (sandbox.SnapshotInfo, error) {
	info, err := h.Get(ctx, id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	kind := opts.Kind
	if kind == "" {
		kind = "snapshot"
	}
	sn := sandbox.SnapshotInfo{
		ID: fmt.Sprintf("sn%d", h.seq), Kind: kind, SandboxID: id, ParentID: h.from[id],
		VCPUs: info.VCPUs, MemoryMiB: info.MemoryMiB, SizeBytes: 1 << 20, CacheKey: opts.CacheKey,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(h.seq) * time.Minute),
	}
	h.snaps[sn.ID] = sn
	return sn, nil
}

// GetSnapshot describes a snapshot with what uses it.
func (h *Host) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sn, ok := h.snaps[id]
	if !ok {
		return sn, fmt.Errorf("%w: snapshot %s", sandbox.ErrNotFound, id)
	}
	sn.UsedBy = h.usedBy(ctx, id)
	return sn, nil
}

// usedBy lists the live sandboxes, snapshots and templates that refer to
// snapshot id. h.mu is held.
func (h *Host) usedBy(ctx context.Context, id string) []string {
	var out []string
	for sb, snap := range h.from {
		if _, err := h.Manager.Get(ctx, sb); snap == id && err == nil {
			out = append(out, "sandbox "+sb)
		}
	}
	for _, sn := range h.snaps {
		if sn.ParentID == id {
			out = append(out, "snapshot "+sn.ID)
		}
	}
	for _, t := range h.templates {
		if t.SnapshotID == id {
			out = append(out, "template "+t.Name)
		}
	}
	slices.Sort(out)
	return out
}

// ListSnapshots lists the snapshots, oldest first.
func (h *Host) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Collect(maps.Values(h.snaps))
	slices.SortFunc(out, func(a, b sandbox.SnapshotInfo) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for i := range out {
		out[i].UsedBy = h.usedBy(ctx, out[i].ID)
	}
	return out, nil
}

// DeleteSnapshot deletes a snapshot that nothing uses.
func (h *Host) DeleteSnapshot(ctx context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.snaps[id]; !ok {
		return fmt.Errorf("%w: snapshot %s", sandbox.ErrNotFound, id)
	}
	if used := h.usedBy(ctx, id); len(used) > 0 {
		return fmt.Errorf("%w: snapshot %s is used by %s", sandbox.ErrInUse, id, strings.Join(used, ", "))
	}
	delete(h.snaps, id)
	return nil
}

// CreateTemplate names a known snapshot, replacing a template of that name.
func (h *Host) CreateTemplate(ctx context.Context, name, snapshotID string, poolSize int) (sandbox.TemplateInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.snaps[snapshotID]; !ok {
		return sandbox.TemplateInfo{}, fmt.Errorf("%w: snapshot %s", sandbox.ErrNotFound, snapshotID)
	}
	t := sandbox.TemplateInfo{Name: name, SnapshotID: snapshotID, PoolSize: poolSize, PoolReady: poolSize,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h.templates[name] = t
	return t, nil
}

// GetTemplate describes a template.
func (h *Host) GetTemplate(ctx context.Context, name string) (sandbox.TemplateInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.templates[name]
	if !ok {
		return t, fmt.Errorf("%w: %s", sandbox.ErrTemplateNotFound, name)
	}
	return t, nil
}

// ListTemplates lists the templates by name.
func (h *Host) ListTemplates(ctx context.Context) ([]sandbox.TemplateInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Collect(maps.Values(h.templates))
	slices.SortFunc(out, func(a, b sandbox.TemplateInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteTemplate deletes a template.
func (h *Host) DeleteTemplate(ctx context.Context, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.templates[name]; !ok {
		return fmt.Errorf("%w: %s", sandbox.ErrTemplateNotFound, name)
	}
	delete(h.templates, name)
	return nil
}

// ReleaseSandbox refuses: the stand-in host has no snapshot store, so no
// sandbox of it is durable.
func (h *Host) ReleaseSandbox(ctx context.Context, id string) error {
	return fmt.Errorf("%w: sandbox %s", sandbox.ErrNotDurable, id)
}
