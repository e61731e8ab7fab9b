//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/internal/leakcheck"
	"github.com/agentbox/agentbox/internal/waitfor"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// childHostd is hostd in a child process of the test (the restart tests
// kill it): it runs as `agentbox serve` does (sandboxes left running when it
// stops, SIGTERM handled), writes its address to DIR/addr and serves until
// killed or signalled. AGENTBOX_FAULT, if set, kills it at that step.
func childHostd(dir string) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	a := vmmtest.Assets{Kernel: os.Getenv("CHILD_KERNEL"), Initramfs: os.Getenv("CHILD_INITRAMFS"), BaseImage: os.Getenv("CHILD_BASE")}
	logf, _ := os.OpenFile(filepath.Join(dir, "child-hostd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	cfg := hostd.Config{Listen: "127.0.0.1:0", DataDir: dir, APIKey: testKey, VMM: "qemu", Accel: "tcg",
		Kernel: a.Kernel, Initramfs: a.Initramfs, BaseImage: a.BaseImage, Logger: slog.New(slog.NewTextHandler(logf, nil)),
		LeaveRunning: true, ShutdownTimeout: 2 * time.Second}
	if u := os.Getenv("CHILD_SNAPSHOT_STORE"); u != "" {
		// Two of these share one store (portable_e2e_test.go); no warm
		// pool, to leave the CPUs to the test's VMs.
		cfg.SnapshotStore.URL, cfg.BasePool = u, -1
	}
	err := hostd.RunWithReady(ctx, cfg, func(addr string) {
		_ = os.WriteFile(filepath.Join(dir, "addr.tmp"), []byte(addr), 0o600)
		_ = os.Rename(filepath.Join(dir, "addr.tmp"), filepath.Join(dir, "addr"))
	})
	fmt.Fprintln(logf, "child hostd returned:", err)
	if err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// child is one hostd process of a restart test.
type child struct {
	cmd  *exec.Cmd
	c    *client.Client
	done chan error
}

// startChild runs a child hostd on data with AGENTBOX_FAULT=faultStep ("":
// none) and waits for it to serve.
func startChild(t *testing.T, data, faultStep string) *child {
	t.Helper()
	h := spawnChild(t, data, faultStep)
	var addr []byte
	var err error
	waitfor.Cond(t, "the child hostd to serve", func() bool {
		addr, err = os.ReadFile(filepath.Join(data, "addr"))
		return err == nil
	})
	if h.c, err = client.New("http://"+string(addr), testKey); err != nil {
		t.Fatal(err)
	}
	return h
}

// spawnChild runs a child hostd on data with AGENTBOX_FAULT=faultStep, not
// waiting for it to serve (it may die at the fault point first).
func spawnChild(t *testing.T, data, faultStep string) *child {
	t.Helper()
	a := vmmtest.FindAssets(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(data, "addr"))
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "AGENTBOX_TEST_CHILD_HOSTD="+data, fault.Env+"="+faultStep,
		"CHILD_KERNEL="+a.Kernel, "CHILD_INITRAMFS="+a.Initramfs, "CHILD_BASE="+a.BaseImage)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &child{cmd: cmd, done: make(chan error, 1)}
	go func() { h.done <- cmd.Wait() }()
	t.Cleanup(h.kill)
	return h
}

// kill ends the child with SIGKILL (if it still runs) and reaps it.
func (h *child) kill() {
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	h.wait()
}

// wait waits for the child's exit and returns its error.
func (h *child) wait() error {
	err, ok := <-h.done
	if ok {
		close(h.done)
	}
	return err
}

// vmOf reads the VMM a sandbox's hostd recorded (its vmm.json).
func vmOf(t *testing.T, data, id string) vmm.Process {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "sandboxes", id, "vmm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Process vmm.Process `json:"process"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.Process
}

// killVMAtEnd stops p when the test ends, if it still runs (the VMMs of a
// child hostd outlive it by design).
func killVMAtEnd(t *testing.T, p vmm.Process) {
	t.Cleanup(func() {
		if h, err := vmm.OpenProcess(p); err == nil {
			_ = h.Signal(syscall.SIGKILL)
			<-h.Done()
			h.Close()
		}
	})
}

// follow attaches to session execID from offset, appending its output to
// out, until it exits (true) or the stream ends (false).
func follow(ctx context.Context, c *client.Client, id, execID string, offset int64, out *bytes.Buffer, seen chan<- int64) (bool, error) {
	exited := false
	err := c.Attach(ctx, id, execID, offset, func(ev client.Event) error {
		if len(ev.Data) > 0 {
			if ev.Offset != int64(out.Len()) {
				return fmt.Errorf("output at offset %d, want %d", ev.Offset, out.Len())
			}
			out.Write(ev.Data)
			if seen != nil {
				select {
				case seen <- int64(out.Len()):
				default:
				}
			}
		}
		if ev.ExitCode != nil {
			exited = *ev.ExitCode == 0
		}
		return nil
	})
	return exited, err
}

// TestHostdRestart: sandboxes outlive hostd. hostd is killed with -9 in
// the middle of a streamed exec; its VMM and network namespace run on; the
// next hostd re-adopts the sandbox, the client re-attaches at the offset it
// had and loses no output, and the proxy answers in the sandbox's namespace
// again. A fork's hostd is stopped with SIGTERM while a stream is in
// flight: it exits, the stream is cut, both VMs run on. With the parent's
// VMM killed while no hostd runs, and hostd killed in the middle of the
// fork's delete (a fault point), the next hostds mark the parent failed
// with the reason (its disk kept) and finish the fork's cleanup: no VMM,
// namespace, cgroup or directory is left.
func TestHostdRestart(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	netDataDirsMu.Lock()
	netDataDirs = append(netDataDirs, data)
	netDataDirsMu.Unlock()
	ctx := context.Background()
	inst := netns.InstallationOf(data)
	t.Cleanup(func() { // after every child's
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(data, "child-hostd.log"))
			t.Logf("child hostd log:\n%s", b)
		}
	})

	h1 := startChild(t, data, "")
	sb, err := h1.c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	vm := vmOf(t, data, sb.ID)
	killVMAtEnd(t, vm)
	// Output before and after a pause, in which hostd is killed.
	const lines, half = 4000, 2000
	execID, err := h1.c.ExecBackground(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh", "-c",
		fmt.Sprintf("seq -f line-%%g 1 %d; sleep 3; seq -f line-%%g %d %d", half, half+1, lines)}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	seen := make(chan int64, 1)
	res := make(chan error, 1)
	go func() {
		_, err := follow(ctx, h1.c, sb.ID, execID, 0, &out, seen)
		res <- err
	}()
	var first strings.Builder
	for i := 1; i <= half; i++ {
		fmt.Fprintf(&first, "line-%d\n", i)
	}
	for n := int64(0); n < int64(first.Len()); {
		select {
		case n = <-seen:
		case err := <-res:
			t.Fatalf("the stream ended before hostd was killed: %v", err)
		}
	}
	// An exec timeout armed by this hostd is the next one's to carry out.
	timed, err := h1.c.ExecBackground(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sleep", "600"}, TimeoutS: 15})
	if err != nil {
		t.Fatal(err)
	}
	h1.kill() // mid-stream
	if err := <-res; err == nil {
		t.Fatal("the stream ended cleanly although hostd was killed")
	}
	if !vm.Alive() {
		t.Fatalf("the vmm (pid %d) died with hostd", vm.PID)
	}
	if !netns.Exists(inst.Name(sb.ID)) {
		t.Fatalf("the namespace died with hostd")
	}
	t.Logf("hostd killed after %d bytes of output", out.Len())

	h2 := startChild(t, data, "")
	got, err := h2.c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "running" {
		t.Fatalf("sandbox after the restart: %+v, %v", got, err)
	}
	if p := vmOf(t, data, sb.ID); p != vm {
		t.Errorf("the vmm after the restart is %v, want the same process %v", p, vm)
	}
	exited, err := follow(ctx, h2.c, sb.ID, execID, int64(out.Len()), &out, nil)
	if err != nil || !exited {
		t.Fatalf("re-attach: exited %v, %v", exited, err)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if out.String() != want.String() {
		t.Errorf("output across the restart: %d bytes, want %d (lost or repeated output)", out.Len(), want.Len())
	}
	if sig := execSignal(t, h2.c, sb.ID, timed); sig != "SIGKILL" {
		t.Errorf("the exec under a 15 s timeout set before the restart: signal %q; want killed (SIGKILL) by the next hostd", sig)
	}
	if _, status, _ := curl(t, h2.c, sb.ID, "--resolve", "denied.test:80:10.0.0.1", "http://denied.test/"); status != "403" {
		t.Errorf("the proxy after the restart: denied.test got %s, want 403", status)
	}
	h2.kill()
	checkFaults(t, data, sb.ID)
	h5 := startChild(t, data, "")
	fork := checkSigterm(t, h5, data, sb.ID)
	checkCleanups(t, data, sb.ID, fork)
}

// execSignal attaches to exec execID of sandbox id until it ends (at most
// 3 minutes) and returns the signal that ended it ("" for none).
func execSignal(t *testing.T, c *client.Client, id, execID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var signal string
	err := c.Attach(ctx, id, execID, 0, func(ev client.Event) error {
		if ev.ExitCode != nil && ev.Signal != nil {
			signal = *ev.Signal
		}
		return nil
	})
	if err != nil {
		t.Errorf("attach to %s: %v", execID, err)
	}
	return signal
}

// checkSigterm forks id (the one more VM this test runs), then stops hostd
// with SIGTERM while a stream is in flight: hostd exits in time, cutting
// the stream, and both VMMs run on.
func checkSigterm(t *testing.T, h *child, data, id string) string {
	ctx := context.Background()
	forks, err := h.c.Fork(ctx, id, 1)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	fork := forks[0].ID
	fvm := vmOf(t, data, fork)
	killVMAtEnd(t, fvm)
	streamErr := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		streamErr <- h.c.ExecStream(ctx, fork, client.ExecRequest{Cmd: []string{"sh", "-c", "echo go; sleep 600"}}, func(ev client.Event) error {
			if len(ev.Data) > 0 {
				select {
				case <-started:
				default:
					close(started)
				}
			}
			return nil
		})
	}()
	<-started
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(); err != nil {
		t.Errorf("hostd on SIGTERM: %v, want a clean exit", err)
	}
	if err := <-streamErr; err == nil {
		t.Error("the stream in flight went on after hostd stopped")
	}
	if !fvm.Alive() {
		t.Error("the fork's vmm did not outlive a hostd stopped with SIGTERM")
	}
	return fork
}

// checkCleanups: the parent's VMM dies while no hostd runs, and hostd dies
// in the middle of the fork's delete; the next hostds leave the parent
// failed with its disk, and nothing of the fork.
func checkCleanups(t *testing.T, data, id, fork string) {
	ctx := context.Background()
	vm := vmOf(t, data, id) // a new process since the matrix's resume
	fvm := vmOf(t, data, fork)
	h, err := vmm.OpenProcess(vm)
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Signal(syscall.SIGKILL)
	<-h.Done()
	h.Close()

	h3 := startChild(t, data, "delete:stopping")
	got, err := h3.c.GetSandbox(ctx, id)
	if err != nil || got.State != "failed" || !strings.Contains(got.Error, "gone") {
		t.Errorf("sandbox whose vmm died while hostd was down: %+v, %v; want failed, saying the vm is gone", got, err)
	}
	if ents, _ := filepath.Glob(filepath.Join(data, "sandboxes", id, "disk-*.qcow2")); len(ents) == 0 {
		t.Error("the failed sandbox's disk was removed")
	}
	if got, err := h3.c.GetSandbox(ctx, fork); err != nil || got.State != "running" {
		t.Fatalf("fork after the restart: %+v, %v", got, err)
	}
	if err := h3.c.DeleteSandbox(ctx, fork); err == nil {
		t.Error("delete succeeded although hostd had a fault point in it")
	}
	if err := h3.wait(); err == nil {
		t.Error("hostd did not die at the fault point")
	}

	h4 := startChild(t, data, "")
	for _, sid := range []string{id, fork} {
		if got, err := h4.c.GetSandbox(ctx, sid); err != nil || got.State != "failed" {
			t.Errorf("%s after the restart: %+v, %v; want failed", sid, got, err)
		}
	}
	if fvm.Alive() {
		t.Errorf("the vmm of a sandbox caught being deleted still runs")
	}
	if _, err := os.Stat(filepath.Join(data, "sandboxes", fork)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory of a sandbox caught being deleted is still there: %v", err)
	}
	if netns.Exists(netns.InstallationOf(data).Name(fork)) {
		t.Error("the namespace of a sandbox caught being deleted is still there")
	}
	for _, sid := range []string{id, fork} {
		if err := h4.c.DeleteSandbox(ctx, sid); err != nil {
			t.Errorf("delete %s: %v", sid, err)
		}
	}
	if err := h4.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := h4.wait(); err != nil {
		t.Errorf("hostd on SIGTERM: %v", err)
	}
	if ids, _ := netns.InstallationOf(data).List(); len(ids) > 0 {
		t.Errorf("namespaces left: %v", ids)
	}
	if left := leakcheck.Cgroups(data); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "sandboxes")); len(ents) > 0 {
		t.Errorf("sandbox directories left: %d", len(ents))
	}
}

// faultStep is one row of the crash-consistency matrix: hostd is killed at
// step while op runs on the sandbox, and the next hostd must leave it in
// state (running sandboxes re-adopted, the VM the same process or, for a
// sandbox that was paused, none), with check's extra conditions.
type faultStep struct {
	step  string
	op    func(ctx context.Context, c *client.Client, id string) error
	state string
	check func(t *testing.T, c *client.Client, id string)
}

// checkFaults runs the matrix on sandbox id (one VM: each step's op is
// cheap on a running sandbox, and the rows leave it running or paused for
// the next).
func checkFaults(t *testing.T, data, id string) {
	var sessions int
	var snaps int
	var pausedExec string
	rows := []faultStep{
		{step: "exec:started", state: "running",
			op: func(ctx context.Context, c *client.Client, id string) error {
				_, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", "echo started-before-the-crash"}})
				return err
			},
			check: func(t *testing.T, c *client.Client, id string) {
				list, err := c.ListExecs(context.Background(), id)
				if err != nil || len(list) <= sessions {
					t.Errorf("the exec started before the crash is not listed: %d sessions, %v", len(list), err)
				}
			}},
		{step: "snapshot:captured", state: "running",
			op: func(ctx context.Context, c *client.Client, id string) error {
				_, err := c.Snapshot(ctx, id, client.SnapshotRequest{})
				return err
			},
			check: func(t *testing.T, c *client.Client, id string) {
				list, err := c.ListSnapshots(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, sn := range list {
					if _, err := c.GetSnapshot(context.Background(), sn.ID); err != nil {
						t.Errorf("listed snapshot %s: %v", sn.ID, err)
					}
				}
				snaps = len(list)
				// The guest writes on after the crash, into the overlay the
				// VM has (not the one the dead hostd had recorded).
				mustExec(t, c, id, "sh", "-c", "echo after-the-snapshot > /root/after; sync")
			}},
		{step: "fork:snapshotted", state: "running",
			op: func(ctx context.Context, c *client.Client, id string) error {
				_, err := c.Fork(ctx, id, 1)
				return err
			},
			check: func(t *testing.T, c *client.Client, id string) {
				if list, _ := c.ListSnapshots(context.Background()); len(list) != snaps+1 {
					t.Errorf("snapshots after a fork cut after its snapshot: %d, want %d", len(list), snaps+1)
				} else {
					snaps = len(list)
				}
			}},
		{step: "create:booted", state: "running",
			op: func(ctx context.Context, c *client.Client, id string) error {
				_, err := c.Fork(ctx, id, 1)
				return err
			},
			check: func(t *testing.T, c *client.Client, id string) {
				// The half-made fork is failed, with nothing left on the
				// host: only the parent has a namespace and a cgroup.
				list, err := c.ListSandboxes(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, sb := range list {
					if sb.ID != id && sb.State != "failed" {
						t.Errorf("the fork cut mid-create is %s, want failed", sb.State)
					}
					if sb.ID != id {
						_ = c.DeleteSandbox(context.Background(), sb.ID)
					}
				}
				if ids, _ := netns.InstallationOf(data).List(); len(ids) != 1 {
					t.Errorf("namespaces after a create cut mid-way: %v, want only the parent's", ids)
				}
				if left := leakcheck.Cgroups(data); len(left) != 1 {
					t.Errorf("cgroups after a create cut mid-way: %v, want only the parent's", left)
				}
				snaps++
			}},
		{step: "pause:saved", state: "paused",
			op: func(ctx context.Context, c *client.Client, id string) error {
				// An exec whose timeout falls due while the sandbox is
				// paused and its hostds die (checked at resume:forgotten).
				x, err := c.ExecBackground(ctx, id, client.ExecRequest{Cmd: []string{"sleep", "600"}, TimeoutS: 20})
				if err != nil {
					t.Errorf("the exec before the pause: %v", err)
				}
				pausedExec = x
				_, err = c.Pause(ctx, id)
				return err
			}},
		{step: "resume:restored", state: "paused",
			op: func(ctx context.Context, c *client.Client, id string) error {
				_, err := c.Resume(ctx, id)
				return err
			}},
		{step: "resume:forgotten", state: "running",
			op: func(ctx context.Context, c *client.Client, id string) error {
				_, err := c.Resume(ctx, id)
				return err
			},
			check: func(t *testing.T, c *client.Client, id string) {
				if r := mustExec(t, c, id, "cat", "/root/after"); r.Stdout != "after-the-snapshot\n" {
					t.Errorf("the file written after the crashed snapshot: got %q", r.Stdout)
				}
				if list, _ := c.ListSnapshots(context.Background()); len(list) != snaps {
					t.Errorf("snapshots: %d, want %d", len(list), snaps)
				}
				if sig := execSignal(t, c, id, pausedExec); sig != "SIGKILL" {
					t.Errorf("the exec under a 20 s timeout, paused across three hostds: signal %q; want killed (SIGKILL)", sig)
				}
			}},
	}
	for _, row := range rows {
		h := startChild(t, data, row.step)
		if list, err := h.c.ListExecs(context.Background(), id); err == nil {
			sessions = len(list)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		err := row.op(ctx, h.c, id)
		cancel()
		if err == nil {
			t.Errorf("%s: the operation succeeded, the fault point was not reached", row.step)
		}
		if err := h.wait(); err == nil {
			t.Errorf("%s: hostd exited cleanly instead of at the fault point", row.step)
		}
		h = startChild(t, data, "")
		got, err := h.c.GetSandbox(context.Background(), id)
		if err != nil || string(got.State) != row.state {
			t.Fatalf("%s: after the restart the sandbox is %+v, %v; want %s", row.step, got, err, row.state)
		}
		inst := netns.InstallationOf(data)
		if row.state == "running" {
			if p := vmOf(t, data, id); !p.Alive() {
				t.Errorf("%s: the running sandbox's vmm %v is not running", row.step, p)
			} else {
				killVMAtEnd(t, p)
			}
			if !netns.Exists(inst.Name(id)) {
				t.Errorf("%s: the running sandbox has no namespace", row.step)
			}
		} else if ids, _ := inst.List(); len(ids) > 0 {
			t.Errorf("%s: namespaces of a paused sandbox left: %v", row.step, ids)
		}
		if row.check != nil {
			row.check(t, h.c, id)
		}
		h.kill()
	}
}
