// Package apitest holds a fake of the API's sandbox manager, for tests of
// the API, the Go client and the CLI. It runs nothing: sandboxes and guest
// files live in maps, and a test supplies exec's behaviour.
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// Manager is an in-memory api.Manager: sandboxes in a map, guest files in
// another, exec behaviour supplied by the test.
type Manager struct {
	mu        sync.Mutex
	sandboxes map[string]sandbox.Info
	files     map[string]File
	calls     []string
	signals   []syscall.Signal
	err       error
	exec      ExecFunc
	attach    AttachFunc
	readFile  func(path string) (io.ReadCloser, error)
	watch     []sandbox.WatchEvent
	snapshots map[string]sandbox.SnapshotInfo
	templates map[string]sandbox.TemplateInfo
}

// ExecFunc is the behaviour of Manager.Exec.
type ExecFunc func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error

// File is a guest file of the fake.
type File struct {
	Data []byte
	Mode fs.FileMode
	Dir  bool
}

// NewManager returns a fake with no sandboxes and a guest filesystem holding
// only "/".
func NewManager() *Manager {
	return &Manager{
		sandboxes: map[string]sandbox.Info{},
		snapshots: map[string]sandbox.SnapshotInfo{},
		templates: map[string]sandbox.TemplateInfo{},
		files:     map[string]File{"/": {Dir: true, Mode: fs.ModeDir | 0o755}},
	}
}

// SetErr makes every later call fail with err (nil restores the fake).
func (f *Manager) SetErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// SetExec replaces Exec's behaviour. The default emits start (exec id
// "e1"), Cmd[1:] joined by spaces and a newline on stdout, and exit 0.
func (f *Manager) SetExec(fn ExecFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exec = fn
}

// SetReadFile replaces ReadFile's behaviour.
func (f *Manager) SetReadFile(fn func(path string) (io.ReadCloser, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readFile = fn
}

// File returns the guest file at path.
func (f *Manager) File(path string) (File, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ff, ok := f.files[path]
	return ff, ok
}

// Signals returns the signals sent so far.
func (f *Manager) Signals() []syscall.Signal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.signals)
}

// ResetCalls forgets the calls made so far.
func (f *Manager) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

func (f *Manager) call(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	return f.err
}

// Calls returns the names of the methods called so far, in order.
func (f *Manager) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *Manager) Create(ctx context.Context, opts sandbox.CreateOptions) (sandbox.Info, error) {
	if err := f.call("Create"); err != nil {
		return sandbox.Info{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	info := sandbox.Info{
		ID:        fmt.Sprintf("sb%d", len(f.sandboxes)+1),
		State:     sandbox.StateRunning,
		VCPUs:     max(opts.VCPUs, 1),
		MemoryMiB: max(opts.MemoryMiB, 512),
		Env:       opts.Env,
		TimeoutS:  opts.TimeoutS,
		Metadata:  opts.Metadata,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(len(f.sandboxes)) * time.Second),
		VMPID:     4242,
	}
	f.sandboxes[info.ID] = info
	return info, nil
}

func (f *Manager) lookup(id string) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, ok := f.sandboxes[id]
	if !ok {
		return sandbox.Info{}, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	return info, nil
}

func (f *Manager) Get(ctx context.Context, id string) (sandbox.Info, error) {
	if err := f.call("Get"); err != nil {
		return sandbox.Info{}, err
	}
	return f.lookup(id)
}

func (f *Manager) List(ctx context.Context) ([]sandbox.Info, error) {
	if err := f.call("List"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Info
	for _, info := range f.sandboxes {
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b sandbox.Info) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

func (f *Manager) Delete(ctx context.Context, id string) error {
	if err := f.call("Delete"); err != nil {
		return err
	}
	if _, err := f.lookup(id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, id)
	return nil
}

func (f *Manager) Exec(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
	if err := f.call("Exec"); err != nil {
		return err
	}
	if _, err := f.lookup(id); err != nil {
		return err
	}
	f.mu.Lock()
	fn := f.exec
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, id, req, emit)
	}
	return EmitAll(emit,
		sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"},
		sandbox.ExecEvent{Type: sandbox.EventStdout, Data: []byte(strings.Join(req.Cmd[1:], " ") + "\n")},
		sandbox.ExecEvent{Type: sandbox.EventExit, ExitCode: 0},
	)
}

// EmitAll emits evs in order and stops at the first error.
func EmitAll(emit func(sandbox.ExecEvent) error, evs ...sandbox.ExecEvent) error {
	for _, ev := range evs {
		if err := emit(ev); err != nil {
			return err
		}
	}
	return nil
}

func (f *Manager) Signal(ctx context.Context, id, execID string, sig syscall.Signal) error {
	if err := f.call("Signal"); err != nil {
		return err
	}
	if _, err := f.lookup(id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, sig)
	return nil
}

func (f *Manager) file(id, p string) (File, error) {
	if _, err := f.lookup(id); err != nil {
		return File{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ff, ok := f.files[p]
	if !ok {
		return File{}, &fs.PathError{Op: "stat", Path: p, Err: syscall.ENOENT}
	}
	return ff, nil
}

func (f *Manager) ReadFile(ctx context.Context, id, p string) (io.ReadCloser, error) {
	if err := f.call("ReadFile"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	fn := f.readFile
	f.mu.Unlock()
	if fn != nil {
		return fn(p)
	}
	ff, err := f.file(id, p)
	switch {
	case err != nil:
		return nil, err
	case ff.Dir:
		return nil, &fs.PathError{Op: "open", Path: p, Err: syscall.EISDIR}
	}
	return io.NopCloser(bytes.NewReader(ff.Data)), nil
}

func (f *Manager) WriteFile(ctx context.Context, id, p string, mode fs.FileMode, r io.Reader) error {
	if err := f.call("WriteFile"); err != nil {
		return err
	}
	if _, err := f.lookup(id); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Like the real manager: missing parents are created (0755).
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := f.files[d]; !ok {
			f.files[d] = File{Dir: true, Mode: fs.ModeDir | 0o755}
		}
	}
	f.files[p] = File{Data: data, Mode: mode}
	return nil
}

func (f *Manager) ListDir(ctx context.Context, id, p string) ([]sandbox.FileInfo, error) {
	if err := f.call("ListDir"); err != nil {
		return nil, err
	}
	if _, err := f.file(id, p); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.FileInfo
	for name, ff := range f.files {
		if name != p && path.Dir(name) == p {
			out = append(out, fileInfo(name, ff))
		}
	}
	slices.SortFunc(out, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func fileInfo(p string, ff File) sandbox.FileInfo {
	return sandbox.FileInfo{
		Name: path.Base(p), Path: p, Size: int64(len(ff.Data)), Mode: ff.Mode,
		ModTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), IsDir: ff.Dir,
	}
}

func (f *Manager) Stat(ctx context.Context, id, p string) (sandbox.FileInfo, error) {
	if err := f.call("Stat"); err != nil {
		return sandbox.FileInfo{}, err
	}
	ff, err := f.file(id, p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return fileInfo(p, ff), nil
}

func (f *Manager) Mkdir(ctx context.Context, id, p string) error {
	if err := f.call("Mkdir"); err != nil {
		return err
	}
	if _, err := f.lookup(id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for d := p; d != "/"; d = path.Dir(d) {
		f.files[d] = File{Dir: true, Mode: fs.ModeDir | 0o755}
	}
	return nil
}

func (f *Manager) Remove(ctx context.Context, id, p string, recursive bool) error {
	if err := f.call(fmt.Sprintf("Remove recursive=%v", recursive)); err != nil {
		return err
	}
	if _, err := f.file(id, p); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.files, p)
	return nil
}

func (f *Manager) Rename(ctx context.Context, id, from, to string) error {
	if err := f.call("Rename"); err != nil {
		return err
	}
	ff, err := f.file(id, from)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.files, from)
	f.files[to] = ff
	return nil
}

// Keys is an in-memory auth.KeyStore.
type Keys struct {
	mu     sync.Mutex
	hashes map[string]bool
	err    error
}

// NewKeys returns a Keys holding the given hashes.
func NewKeys(hashes ...string) *Keys {
	k := &Keys{hashes: map[string]bool{}}
	for _, h := range hashes {
		k.hashes[h] = true
	}
	return k
}

// SetErr makes every later call fail with err.
func (m *Keys) SetErr(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
}

func (m *Keys) AddAPIKey(ctx context.Context, name, hash string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hashes[hash] = true
	return m.err
}

func (m *Keys) HasAPIKey(ctx context.Context, hash string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hashes[hash], m.err
}

// The fake keeps the snapshots and templates made through it, without
// their contents or lineage.

// Snapshot records the call and returns (and keeps) a snapshot "sn-ID" of
// a known sandbox, of 1 MiB.
func (f *Manager) Snapshot(ctx context.Context, id string, opts sandbox.SnapshotOptions) (sandbox.SnapshotInfo, error) {
	if err := f.call("Snapshot " + id); err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	info, err := f.lookup(id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	sn := sandbox.SnapshotInfo{ID: "sn-" + id, Kind: "snapshot", SandboxID: id, VCPUs: info.VCPUs, MemoryMiB: info.MemoryMiB, SizeBytes: 1 << 20}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots[sn.ID] = sn
	return sn, nil
}

// Fork creates count sandboxes like the known sandbox id.
func (f *Manager) Fork(ctx context.Context, id string, opts sandbox.ForkOptions) ([]sandbox.Info, error) {
	count := opts.Count
	if _, err := f.lookup(id); err != nil {
		return nil, err
	}
	var out []sandbox.Info
	for range count {
		info, err := f.Create(ctx, sandbox.CreateOptions{})
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Pause marks a known sandbox paused.
func (f *Manager) Pause(ctx context.Context, id string) (sandbox.Info, error) {
	return f.setState(id, sandbox.StatePaused)
}

// Resume marks a known sandbox running.
func (f *Manager) Resume(ctx context.Context, id string) (sandbox.Info, error) {
	return f.setState(id, sandbox.StateRunning)
}

// ReleaseSandbox forgets a paused, durable sandbox; the fake has no
// snapshot store, so it refuses unless a test marked the sandbox durable.
func (f *Manager) ReleaseSandbox(ctx context.Context, id string) error {
	info, err := f.lookup(id)
	if err != nil {
		return err
	}
	if info.State != sandbox.StatePaused || !info.Durable {
		return fmt.Errorf("%w: sandbox %s", sandbox.ErrNotDurable, id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, id)
	return nil
}

func (f *Manager) setState(id string, st sandbox.State) (sandbox.Info, error) {
	info, err := f.lookup(id)
	if err != nil {
		return info, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	info.State = st
	f.sandboxes[id] = info
	return info, nil
}

// GetSnapshot finds a snapshot made through the fake.
func (f *Manager) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sn, ok := f.snapshots[id]
	if !ok {
		return sandbox.SnapshotInfo{}, fmt.Errorf("%w: %s", sandbox.ErrSnapshotNotFound, id)
	}
	return sn, nil
}

// ListSnapshots lists the snapshots made through the fake, by id.
func (f *Manager) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.SnapshotInfo
	for _, sn := range f.snapshots {
		out = append(out, sn)
	}
	slices.SortFunc(out, func(a, b sandbox.SnapshotInfo) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteSnapshot refuses every snapshot it keeps as in use.
func (f *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := f.GetSnapshot(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("%w: snapshot %s", sandbox.ErrInUse, id)
}

// CreateTemplate keeps and returns the template it was given.
func (f *Manager) CreateTemplate(ctx context.Context, name, snapshotID string, poolSize int) (sandbox.TemplateInfo, error) {
	t := sandbox.TemplateInfo{Name: name, SnapshotID: snapshotID, PoolSize: poolSize}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.templates[name] = t
	return t, nil
}

// GetTemplate finds a template made through the fake.
func (f *Manager) GetTemplate(ctx context.Context, name string) (sandbox.TemplateInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.templates[name]
	if !ok {
		return sandbox.TemplateInfo{}, fmt.Errorf("%w: %s", sandbox.ErrTemplateNotFound, name)
	}
	return t, nil
}

// ListTemplates lists the templates made through the fake, by name.
func (f *Manager) ListTemplates(ctx context.Context) ([]sandbox.TemplateInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.TemplateInfo
	for _, t := range f.templates {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b sandbox.TemplateInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteTemplate forgets a template made through the fake.
func (f *Manager) DeleteTemplate(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.templates[name]; !ok {
		return fmt.Errorf("%w: %s", sandbox.ErrTemplateNotFound, name)
	}
	delete(f.templates, name)
	return nil
}

// ListDirPage pages ListDir's entries (sorted by name).
func (f *Manager) ListDirPage(ctx context.Context, id, p, after string, limit int) (sandbox.DirPage, error) {
	all, err := f.ListDir(ctx, id, p)
	if err != nil {
		return sandbox.DirPage{}, err
	}
	var page sandbox.DirPage
	for _, fi := range all {
		if fi.Name <= after {
			continue
		}
		if len(page.Entries) == limit {
			page.More = true
			break
		}
		page.Entries = append(page.Entries, fi)
	}
	return page, nil
}
