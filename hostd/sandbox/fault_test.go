package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/sandbox/sandboxtest"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// faultChildEnv names the data dir of a child "hostd" (this test binary,
// re-executed) that deletes a sandbox and dies at a fault point on the way.
const faultChildEnv = "AGENTBOX_TEST_FAULT_CHILD"

func TestMain(m *testing.M) {
	if data := os.Getenv(faultChildEnv); data != "" {
		if err := faultChild(data); err != nil {
			fmt.Fprintln(os.Stderr, "fault child:", err)
			os.Exit(2)
		}
		os.Exit(0) // the fault point was not reached
	}
	os.Exit(m.Run())
}

// Files of the fault child in its data dir, for the test.
const (
	childSandboxFile = "child-sandbox-id"
	childExecFile    = "child-exec.json" // the identity of the exec's process
	childPIDFile     = "child-exec.pid"
)

// faultChild is a manager over the fake driver on data that creates a
// sandbox, starts a long exec in it and deletes it, with AGENTBOX_FAULT
// set by the test: it never returns from the Delete.
func faultChild(data string) error {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
	if err != nil {
		return err
	}
	opts, err := sandboxtest.Options(data, vmmtest.NewFakeDriver(vmmtest.FakeOptions{}), st)
	if err != nil {
		return err
	}
	m, err := sandbox.New(opts)
	if err != nil {
		return err
	}
	if err := m.Recover(ctx); err != nil {
		return err
	}
	info, err := m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(data, childSandboxFile), []byte(info.ID), 0o600); err != nil {
		return err
	}
	pidFile := filepath.Join(data, childPIDFile)
	script := fmt.Sprintf("echo $$ > %s.tmp && mv %[1]s.tmp %[1]s && exec sleep 600", pidFile)
	if _, err := m.Service().Execs.StartExec(ctx, info.ID, sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}, Cwd: data}); err != nil {
		return err
	}
	p, err := waitPIDFile(pidFile)
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(data, childExecFile), b, 0o600); err != nil {
		return err
	}
	return m.Delete(ctx, info.ID)
}

// waitPIDFile waits (bounded) for the exec to write its pid, and returns
// its identity.
func waitPIDFile(path string) (vmm.Process, error) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return vmm.Process{}, err
		}
		return vmm.Identify(pid)
	}
	return vmm.Process{}, fmt.Errorf("no pid in %s after 30 s", path)
}

// TestDeleteTornDownFault: a hostd killed in a Delete after the sandbox's
// teardown (its VMM stopped, its directory removed) but before its record
// went leaves the record "stopping"; the next hostd marks it failed, with
// its directory gone and nothing of it running, and it can be deleted.
func TestDeleteTornDownFault(t *testing.T) {
	e := sandboxtest.New(t) // the data dir, assets and store of the test's own hostd
	ctx := context.Background()
	if err := e.M.Close(ctx); err != nil {
		t.Fatal(err)
	}
	data := e.Data

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), faultChildEnv+"="+data, fault.Env+"=delete:torn-down")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	// The exec's process, if the child left it running: stopped by its
	// pid and start time when the test ends.
	t.Cleanup(func() {
		if p, err := readProcess(filepath.Join(data, childExecFile)); err == nil {
			if h, err := vmm.OpenProcess(p); err == nil {
				_ = h.Signal(syscall.SIGKILL)
				<-h.Done()
				h.Close()
			}
		}
	})
	select {
	case err = <-done:
		done <- err // for the cleanup
	case <-time.After(2 * time.Minute):
		t.Fatalf("the child hostd did not end within 2 minutes; stderr: %s", stderr.String())
	}
	var ee *exec.ExitError
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !errors.As(err, &ee) || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child hostd: got %v, want killed by SIGKILL at the fault point; stderr: %s", err, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(data, childSandboxFile))
	if err != nil {
		t.Fatal(err)
	}
	id := string(b)
	p, err := readProcess(filepath.Join(data, childExecFile))
	if err != nil {
		t.Fatal(err)
	}

	if r, err := e.St.GetSandbox(ctx, id); err != nil || sandbox.State(r.State) != sandbox.StateStopping {
		t.Fatalf("the record the killed hostd left: got %+v, %v; want stopping", r, err)
	}
	if _, err := os.Stat(filepath.Join(data, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the sandbox's dir at the fault point: got %v, want it removed by the teardown", err)
	}

	d := vmmtest.NewFakeDriver(vmmtest.FakeOptions{})
	opts := e.Opts
	opts.Driver = d
	m2 := sandboxtest.Reopen(t, opts)
	got, err := m2.Get(ctx, id)
	if err != nil || got.State != sandbox.StateFailed || !strings.Contains(got.Error, "stopping") {
		t.Errorf("sandbox after the restart: got %s %q, %v; want failed, caught stopping", got.State, got.Error, err)
	}
	dir := filepath.Join(data, "sandboxes", id)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox's dir after the restart: got %v, want it removed", err)
	}
	if p.Alive() {
		t.Errorf("the sandbox's exec (pid %d) still runs after the restart", p.PID)
	}
	if n := len(d.VMs()); n != 0 {
		t.Errorf("the next manager started %d vms, want none", n)
	}
	if err := m2.Delete(ctx, id); err != nil {
		t.Errorf("delete the failed sandbox: %v", err)
	}
	if list, err := m2.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("sandboxes after its delete: got %+v, %v; want none", list, err)
	}
	if ents, err := os.ReadDir(filepath.Join(data, "sandboxes")); err != nil || len(ents) != 0 {
		t.Errorf("sandbox dirs left: got %d, %v; want none", len(ents), err)
	}
}

// readProcess reads a vmm.Process that the child wrote as JSON.
func readProcess(path string) (vmm.Process, error) {
	var p vmm.Process
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	return p, json.Unmarshal(b, &p)
}
