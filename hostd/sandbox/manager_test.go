package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/waitfor"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// These tests drive the real manager, store and guest agent against the
// in-process fake driver (vmm/vmmtest): no VM, no guest assets, so they run
// in seconds under -race. What needs a real guest (snapshots of memory,
// pause keeping processes, limits inside the guest) is in the *_vm_test.go
// files.

type env struct {
	t     *testing.T
	m     *Manager
	svc   Service
	d     *vmmtest.FakeDriver
	st    *store.Store
	data  string
	close func()
}

// newEnv starts a manager on a fresh data dir with the fake driver. The
// manager is closed when the test ends, and no goroutine may outlive it.
func newEnv(t *testing.T, tweak ...func(*Options)) *env {
	t.Helper()
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img is needed for overlays (Debian's qemu-utils; ci/install-deps.sh installs it)")
	}
	ctx := context.Background()
	before := goleak.IgnoreCurrent()
	data := t.TempDir()
	base := filepath.Join(data, "base.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	kernel := filepath.Join(data, "vmlinux")
	if err := os.WriteFile(kernel, []byte("not a kernel: the fake driver boots nothing"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	d := vmmtest.NewFakeDriver(vmmtest.FakeOptions{})
	opts := Options{Driver: d, Store: st, DataDir: data, Kernel: kernel, BaseImage: base,
		BootTimeout: 20 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	for _, tw := range tweak {
		tw(&opts)
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, m: m, svc: m.Service(), d: d, st: st, data: data}
	closed := false
	e.close = func() {
		if closed {
			return
		}
		closed = true
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		st.Close()
	}
	t.Cleanup(func() {
		e.close()
		for _, vm := range d.VMs() {
			select {
			case <-vm.Done():
			default:
				t.Errorf("vm %d still runs after Close", vm.PID())
			}
		}
		leakOpts := []goleak.Option{before}
		if opts.SnapshotStore != nil {
			// The store's HTTP client keeps idle connections; its zstd
			// decoders their goroutines until the store is closed.
			leakOpts = append(leakOpts, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
				goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
				goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
				goleak.IgnoreAnyFunction("github.com/klauspost/compress/zstd.(*blockDec).startDecoder"))
		}
		goleak.VerifyNone(t, leakOpts...)
	})
	return e
}

// run runs script under sh -c in sandbox id and returns its output and exit code.
func (e *env) run(id, script string) (string, int) {
	e.t.Helper()
	var out bytes.Buffer
	code := -2
	err := e.svc.Exec(context.Background(), id, ExecRequest{Cmd: []string{"sh", "-c", script}}, func(ev ExecEvent) error {
		out.Write(ev.Data)
		if ev.Type == EventExit {
			code = ev.ExitCode
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), code
}

func (e *env) create(opts CreateOptions) Info {
	e.t.Helper()
	info, err := e.m.Create(context.Background(), opts)
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
	return info
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCreateExecFilesDelete(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{Env: map[string]string{"GREETING": "hi"}})
	if info.State != StateRunning || info.VMPID != e.d.Last().PID() {
		t.Fatalf("got %+v, want running with the fake VM's pid", info)
	}
	if out, code := e.run(info.ID, `echo "$GREETING"; exit 3`); out != "hi\n" || code != 3 {
		t.Errorf("exec: got %q exit %d, want %q exit 3", out, code, "hi\n")
	}
	// The fake guest's files are the host's: use a directory of the test.
	p := filepath.Join(t.TempDir(), "notes.txt")
	if err := e.svc.WriteFile(ctx, info.ID, p, 0o640, strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	rc, err := e.svc.ReadFile(ctx, info.ID, p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" {
		t.Errorf("read: got %q, want hello", b)
	}
	fi, err := e.svc.Stat(ctx, info.ID, p)
	if err != nil || fi.Size != 5 || fi.Mode.Perm() != 0o640 {
		t.Errorf("stat: got %+v, %v, want 5 bytes, 0640", fi, err)
	}
	if _, err := e.svc.ReadFile(ctx, info.ID, "relative/path"); !errors.Is(err, ErrBadPath) {
		t.Errorf("relative path: got %v, want ErrBadPath", err)
	}
	dir := filepath.Join(e.data, "sandboxes", info.ID)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("sandbox dir: %v", err)
	}
	if err := e.m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get(ctx, info.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after delete: got %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir after delete: got %v, want it gone", err)
	}
	if err := e.svc.Exec(ctx, info.ID, ExecRequest{Cmd: []string{"true"}}, func(ExecEvent) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("exec after delete: got %v, want ErrNotFound", err)
	}
}

func TestSessionsReattach(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{})
	execID, err := e.svc.StartExec(ctx, info.ID, ExecRequest{Cmd: []string{"sh", "-c", "echo one; sleep 0.2; echo two"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var exit ExecEvent
	err = e.svc.Attach(ctx, info.ID, execID, 0, func(ev ExecEvent) error {
		out.Write(ev.Data)
		if ev.Type == EventExit {
			exit = ev
		}
		return nil
	})
	if err != nil || out.String() != "one\ntwo\n" || exit.ExitCode != 0 {
		t.Fatalf("attach: got %q, %+v, %v", out.String(), exit, err)
	}
	// From an offset: only what follows it.
	out.Reset()
	if err := e.svc.Attach(ctx, info.ID, execID, 4, func(ev ExecEvent) error { out.Write(ev.Data); return nil }); err != nil || out.String() != "two\n" {
		t.Errorf("attach at 4: got %q, %v, want %q", out.String(), err, "two\n")
	}
	list, err := e.svc.Sessions(ctx, info.ID)
	if err != nil || len(list) != 1 || list[0].ID != execID || list[0].Running {
		t.Errorf("sessions: got %+v, %v", list, err)
	}
	if err := e.svc.Signal(ctx, info.ID, "no-such-exec", 9); !errors.Is(err, ErrNotFound) {
		t.Errorf("signal an unknown session: got %v, want ErrNotFound", err)
	}
}

// The exec timeout's kill must reach the command whatever happened to the
// agent connection in between (the timer used to keep the client of the
// exec's start, and its kill was lost after a reconnect).
func TestExecTimeoutKillsAfterReconnect(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{})
	execID, err := e.svc.StartExec(ctx, info.ID, ExecRequest{Cmd: []string{"sleep", "30"}, TimeoutS: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := e.m.reg.live(info.ID)
	b.closeAgent() // the connection drops; the next call dials again
	var exit ExecEvent
	err = e.svc.Attach(ctx, info.ID, execID, 0, func(ev ExecEvent) error {
		if ev.Type == EventExit {
			exit = ev
		}
		return nil
	})
	if err != nil || exit.Signal != "SIGKILL" {
		t.Fatalf("got %+v, %v, want the command killed by SIGKILL", exit, err)
	}
}

// A kill that falls due while the sandbox does not run is sent when it
// runs again.
func TestExecTimeoutDueWhilePaused(t *testing.T) {
	e := newEnv(t)
	info := e.create(CreateOptions{})
	en := e.m.reg.find(info.ID)
	b := en.live()
	e.m.reg.forget(b) // as a pause does
	e.m.timeouts.kill(info.ID, "exec-1")
	en.mu.Lock()
	due := append([]string(nil), en.dueKills...)
	en.mu.Unlock()
	if len(due) != 1 || due[0] != "exec-1" {
		t.Fatalf("due kills: got %v, want [exec-1]", due)
	}
	en.mu.Lock()
	en.box = b
	en.mu.Unlock()
}

func TestFailedCreateLeavesNoCreatingRecord(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.d.FailNextStart(errors.New("no vmm today"))
	if _, err := e.m.Create(ctx, CreateOptions{}); err == nil || !strings.Contains(err.Error(), "no vmm today") {
		t.Fatalf("create: got %v, want the start error", err)
	}
	list, err := e.m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.State != StateFailed || s.Error == "" {
			t.Errorf("after a failed start: got %s %q, want failed with a reason", s.State, s.Error)
		}
	}
}

// failingLimits is a store whose limits cannot be written.
type failingLimits struct{ *store.Store }

func (failingLimits) PutSandboxLimits(context.Context, string, any) error {
	return errors.New("disk full")
}

func TestFailedLimitsWriteLeavesNoRecord(t *testing.T) {
	var st *store.Store
	e := newEnv(t, func(o *Options) {
		st = o.Store.(*store.Store)
		o.Store = failingLimits{st}
	})
	ctx := context.Background()
	if _, err := e.m.Create(ctx, CreateOptions{}); err == nil {
		t.Fatal("create: got nil, want the store's error")
	}
	recs, err := st.ListSandboxes(ctx)
	if err != nil || len(recs) != 0 {
		t.Errorf("records: got %+v, %v, want none", recs, err)
	}
	if e.d.Starts() != 0 {
		t.Errorf("got %d VM starts, want 0", e.d.Starts())
	}
}

func TestVMDeathMarksFailed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{})
	e.d.Last().Die(errors.New("killed by the OOM killer"))
	eventually(t, "state failed", func() bool {
		got, err := e.m.Get(ctx, info.ID)
		return err == nil && got.State == StateFailed && strings.Contains(got.Error, "vm exited unexpectedly")
	})
	if err := e.svc.Exec(ctx, info.ID, ExecRequest{Cmd: []string{"true"}}, func(ExecEvent) error { return nil }); !errors.Is(err, ErrNotRunning) {
		t.Errorf("exec on a failed sandbox: got %v, want ErrNotRunning", err)
	}
}

// TestForkFailsAtOnceOnAnAnsweredError: a restored guest whose agent
// answers SetIdentity with an error fails the fork with that error, asked
// once (a new connection would get the same answer), and its VM is stopped.
func TestForkFailsAtOnceOnAnAnsweredError(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	src := e.create(CreateOptions{})
	e.d.RefuseIdentity(errors.New("read-only file system"))
	_, err := e.m.Fork(ctx, src.ID, ForkOptions{Count: 1})
	if err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("fork: %v, want the agent's answer", err)
	}
	restored := 0
	for _, vm := range e.d.VMs() {
		if vm.RestoredFrom() == "" {
			continue
		}
		restored++
		if n := vm.SystemCalls("SetIdentity"); n != 1 {
			t.Errorf("SetIdentity asked %d times, want once", n)
		}
		select {
		case <-vm.Done():
		default:
			t.Errorf("restored VM %s still runs", vm.Config().ID)
		}
	}
	if restored != 1 {
		t.Errorf("restored VMs: %d, want 1", restored)
	}
}

func TestSnapshotForkLineageAndGC(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	src := e.create(CreateOptions{Metadata: map[string]string{"team": "a"}})
	sn, err := e.m.Snapshot(ctx, src.ID, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Kind != "snapshot" || sn.SandboxID != src.ID || len(sn.UsedBy) != 1 || !strings.HasSuffix(sn.UsedBy[0], src.ID) {
		t.Fatalf("snapshot: got %+v, want kind snapshot, used by its source", sn)
	}
	forks, err := e.m.Fork(ctx, src.ID, ForkOptions{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 2 || forks[0].Metadata["forked_from"] != src.ID || forks[0].Metadata["team"] != "a" {
		t.Fatalf("forks: got %+v", forks)
	}
	for _, f := range forks {
		if out, code := e.run(f.ID, "echo fork"); out != "fork\n" || code != 0 {
			t.Errorf("fork %s: got %q %d", f.ID, out, code)
		}
	}
	if err := e.m.Service().DeleteSnapshot(ctx, sn.ID); !errors.Is(err, ErrInUse) {
		t.Errorf("delete a used snapshot: got %v, want ErrInUse", err)
	}
	if _, err := e.m.Service().GetSnapshot(ctx, "sn-nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown snapshot: got %v, want ErrNotFound", err)
	}
	forkSnap := forks[0].SnapshotID
	for _, f := range forks {
		if err := e.m.Delete(ctx, f.ID); err != nil {
			t.Fatal(err)
		}
	}
	// The fork snapshot is still the source's disk layer: kept.
	if _, err := e.m.Service().GetSnapshot(ctx, forkSnap); err != nil {
		t.Errorf("fork snapshot the source overlays: got %v, want kept", err)
	}
	if err := e.m.Delete(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Service().GetSnapshot(ctx, forkSnap); !errors.Is(err, ErrNotFound) {
		t.Errorf("fork snapshot nothing uses: got %v, want collected", err)
	}
	// Nothing uses the first snapshot now; asked-for snapshots are kept
	// until deleted.
	if err := e.m.Service().DeleteSnapshot(ctx, sn.ID); err != nil {
		t.Errorf("delete the unused snapshot: %v", err)
	}
	if list, _ := e.m.Service().ListSnapshots(ctx); len(list) != 0 {
		t.Errorf("snapshots left: %+v", list)
	}
}

func TestTTLDeletes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{TimeoutS: 1})
	if got, _ := e.m.Get(ctx, info.ID); got.Deadline.IsZero() {
		t.Error("deadline: got zero, want one")
	}
	eventually(t, "deleted by its TTL", func() bool {
		_, err := e.m.Get(ctx, info.ID)
		return errors.Is(err, ErrNotFound)
	})
	if _, err := e.m.ExtendTimeout(ctx, info.ID, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("extend a deleted sandbox: got %v, want ErrNotFound", err)
	}
	other := e.create(CreateOptions{})
	if _, err := e.m.ExtendTimeout(ctx, other.ID, MaxTimeoutS+1); !errors.Is(err, ErrInvalid) {
		t.Errorf("extend past the maximum: got %v, want ErrInvalid", err)
	}
}

func TestPauseResumeAndIdle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{Limits: Limits{IdleTimeoutS: 1}})
	eventually(t, "paused when idle", func() bool {
		got, err := e.m.Get(ctx, info.ID)
		return err == nil && got.State == StatePaused
	})
	// The next exec resumes it.
	if out, _ := e.run(info.ID, "echo back"); out != "back\n" {
		t.Errorf("exec after idle pause: got %q", out)
	}
	if got, _ := e.m.Get(ctx, info.ID); got.State != StateRunning {
		t.Errorf("state: got %s, want running", got.State)
	}
	if e.d.Restores() != 1 {
		t.Errorf("restores: got %d, want 1", e.d.Restores())
	}
	last := e.d.Last()
	if last.SystemCalls("SetTime") == 0 || last.SystemCalls("Reseed") == 0 {
		t.Errorf("resumed guest: clock set %d times, reseeded %d times, want both", last.SystemCalls("SetTime"), last.SystemCalls("Reseed"))
	}
}

func TestConcurrentResumesOfOneSandbox(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{})
	if _, err := e.m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := e.m.Resume(ctx, info.ID)
			errs <- err
		}()
	}
	ok := 0
	for range 4 {
		if err := <-errs; err == nil {
			ok++
		} else if !errors.Is(err, ErrNotRunning) {
			t.Errorf("a losing resume: got %v, want ErrNotRunning", err)
		}
	}
	if ok != 1 || e.d.Restores() != 1 {
		t.Errorf("got %d successful resumes and %d restores, want 1 and 1", ok, e.d.Restores())
	}
}

// heldRestores is a driver whose restores tell begun (if it has room) and
// wait for release; it counts those in flight.
type heldRestores struct {
	vmm.Driver
	n       atomic.Int32
	begun   chan struct{}
	release chan struct{}
}

func (d *heldRestores) Restore(ctx context.Context, cfg vmm.Config, dir string) (vmm.VM, error) {
	d.n.Add(1)
	defer d.n.Add(-1)
	select {
	case d.begun <- struct{}{}:
	default:
	}
	select {
	case <-d.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.Driver.Restore(ctx, cfg, dir)
}

// Close must wait for background work: a warm pool being filled, TTL
// timers, watchers. Close begins while a refill's restore is held; it
// returns once that restore is done, and no restore begins after it. The
// cleanup's goleak check fails on any goroutine left.
func TestCloseWaitsForPoolRefill(t *testing.T) {
	var e *env
	d := &heldRestores{begun: make(chan struct{}, 1), release: make(chan struct{})}
	closed := -1 // restores when Close returned
	// This runs after newEnv's cleanup, whose goleak check waits for every
	// goroutine to end: a restore that began after Close has begun by now.
	t.Cleanup(func() {
		if n := e.d.Restores(); closed >= 0 && n != closed {
			t.Errorf("restores went on after Close: %d, then %d", closed, n)
		}
	})
	e = newEnv(t, func(o *Options) { d.Driver, o.Driver = o.Driver, d })
	release := sync.OnceFunc(func() { close(d.release) })
	defer release() // a test that failed early lets the refill end
	ctx := context.Background()
	info := e.create(CreateOptions{})
	sn, err := e.m.Snapshot(ctx, info.ID, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateTemplate(ctx, "warm", sn.ID, 2); err != nil {
		t.Fatal(err)
	}
	e.create(CreateOptions{TimeoutS: 3600})
	select {
	case <-d.begun:
	case <-time.After(waitfor.Timeout):
		t.Fatal("the pool's refill never began")
	}
	done := make(chan struct{})
	go func() { defer close(done); e.close() }()
	waitfor.Cond(t, "Close to begin", e.m.closing)
	release()
	select {
	case <-done:
	case <-time.After(waitfor.Timeout):
		t.Fatal("Close never returned")
	}
	if n := d.n.Load(); n != 0 {
		t.Errorf("Close returned with %d restores in flight", n)
	}
	closed = e.d.Restores()
}

func TestWarmPoolClaim(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{})
	sn, err := e.m.Snapshot(ctx, info.ID, SnapshotOptions{Env: map[string]string{"FROM": "template"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateTemplate(ctx, "py", sn.ID, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pool filled", func() bool { return e.m.PoolSizes()["py"] == 1 })
	// The claimed sandbox is a VM that ran before the claim (the refill
	// that follows restores a new one at once, so counting restores races).
	before := map[int]bool{}
	for _, vm := range e.d.VMs() {
		before[vm.PID()] = true
	}
	got := e.create(CreateOptions{Template: "py"})
	if !before[got.VMPID] {
		t.Errorf("claim restored a VM (pid %d) instead of taking the warm one", got.VMPID)
	}
	if out, _ := e.run(got.ID, `echo "$FROM"`); out != "template\n" {
		t.Errorf("env from the template: got %q", out)
	}
	eventually(t, "pool refilled", func() bool { return e.m.PoolSizes()["py"] == 1 })
	if err := e.svc.DeleteTemplate(ctx, "py"); err != nil {
		t.Fatal(err)
	}
	if n := e.m.PoolSizes()["py"]; n != 0 {
		t.Errorf("pool after delete: got %d, want 0", n)
	}
}

func TestRecoverMarksLostSandboxesFailed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{})
	paused := e.create(CreateOptions{})
	if _, err := e.m.Pause(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	// A second manager on the same data dir: the first one's VM is not its.
	m2, err := New(e.m.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(ctx)
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := m2.Get(ctx, info.ID); got.State != StateFailed {
		t.Errorf("running sandbox after a restart: got %s, want failed", got.State)
	}
	if got, _ := m2.Get(ctx, paused.ID); got.State != StatePaused {
		t.Errorf("paused sandbox after a restart: got %s, want paused", got.State)
	}
	if _, err := m2.Resume(ctx, paused.ID); err != nil {
		t.Errorf("resume after a restart: %v", err)
	}
	if err := m2.Delete(ctx, paused.ID); err != nil {
		t.Error(err)
	}
}

// TestGetFillsSnapshotID: Get names the snapshot the sandbox's disk
// overlays, as its VM record holds it.
func TestGetFillsSnapshotID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{})
	v, err := e.st.GetSandboxVM(ctx, info.ID)
	if err != nil {
		t.Fatalf("vm record: %v", err)
	}
	v.SnapshotID = "sn-test"
	if err := e.st.PutSandboxVM(ctx, v); err != nil {
		t.Fatal(err)
	}
	got, err := e.m.Get(ctx, info.ID)
	if err != nil || got.SnapshotID != "sn-test" {
		t.Errorf("get: got snapshot %q, %v, want sn-test", got.SnapshotID, err)
	}
}
