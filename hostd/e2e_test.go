//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/hostdtest"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

const testKey = hostdtest.Key

// startHostd runs a real hostd (QEMU, TCG) on a fresh data dir and returns
// a client of it. hostd is stopped when the test ends.
func startHostd(t *testing.T) (*client.Client, string) {
	t.Helper()
	data := vmmtest.ShortTempDir(t)
	c, stop := startHostdOn(t, data)
	t.Cleanup(stop)
	return c, data
}

// startHostdOn runs hostd on data dir data; stop ends it (once).
func startHostdOn(t *testing.T, data string, tweaks ...func(*hostd.Config)) (*client.Client, func()) {
	t.Helper()
	h := hostdtest.Start(t, data, tweaks...)
	return h.Client, h.Stop
}

// runHostd is startHostdOn that returns the API's URL instead of a client.
func runHostd(t *testing.T, data string, tweaks ...func(*hostd.Config)) (string, func()) {
	t.Helper()
	h := hostdtest.Start(t, data, tweaks...)
	return h.URL, h.Stop
}

func TestEndToEnd(t *testing.T) {
	c, data := startHostd(t)
	ctx := context.Background()
	h, err := c.Health(ctx)
	if err != nil || h.VMM != "qemu" || h.Accel != "tcg" {
		t.Fatalf("healthz: %+v, %v", h, err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512, Env: map[string]string{"GREETING": "hello"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if sb.State != "running" || sb.ID == "" {
		t.Fatalf("got %+v, want a running sandbox", sb)
	}
	t.Run("uname and python", func(t *testing.T) {
		r := mustExec(t, c, sb.ID, "uname", "-r")
		if !strings.Contains(r.Stdout, "cloud-amd64") {
			t.Errorf("uname -r: got %q", r.Stdout)
		}
		if r := mustExec(t, c, sb.ID, "python3", "-c", "print(6*7)"); r.Stdout != "42\n" {
			t.Errorf("python3: got %q, want 42", r.Stdout)
		}
		if r := mustExec(t, c, sb.ID, "sh", "-c", "echo $GREETING"); r.Stdout != "hello\n" {
			t.Errorf("sandbox env: got %q", r.Stdout)
		}
	})
	t.Run("exit codes", func(t *testing.T) {
		for _, code := range []int{0, 3} {
			r := mustExec(t, c, sb.ID, "sh", "-c", "exit "+itoa(code))
			if r.ExitCode != code {
				t.Errorf("got exit code %d, want %d", r.ExitCode, code)
			}
		}
	})
	t.Run("10 MiB file round trip", func(t *testing.T) { checkFileRoundTrip(t, c, sb.ID) })
	t.Run("streaming", func(t *testing.T) { checkStreaming(t, c, sb.ID) })
	t.Run("bad input", func(t *testing.T) { checkBadInput(t, c, sb.ID) })
	t.Run("100 MB output", func(t *testing.T) { checkBigOutput(t, c, sb.ID) })
	t.Run("delete during exec", func(t *testing.T) { checkDeleteDuringExec(t, c, sb, data) })
	t.Run("vm killed behind hostd's back", func(t *testing.T) { checkKilledVM(t, c, data) })
}

func mustExec(t *testing.T, c *client.Client, id string, argv ...string) client.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: argv})
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	return r
}

func checkFileRoundTrip(t *testing.T, c *client.Client, id string) {
	ctx := context.Background()
	data := make([]byte, 10<<20)
	rand.Read(data)
	want := sha256.Sum256(data)
	if err := c.Mkdir(ctx, id, "/data/in"); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, id, "/data/in/blob", 0o640, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := c.ReadFile(ctx, id, "/data/in/blob", &got); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got.Bytes()) != want {
		t.Errorf("read back %d bytes with another sha256", got.Len())
	}
	// The guest sees the same bytes.
	r := mustExec(t, c, id, "sha256sum", "/data/in/blob")
	if !strings.HasPrefix(r.Stdout, hexOf(want[:])) {
		t.Errorf("guest sha256sum: got %q", r.Stdout)
	}
	st, err := c.Stat(ctx, id, "/data/in/blob")
	if err != nil || st.Size != int64(len(data)) {
		t.Errorf("stat: %+v, %v", st, err)
	}
}

// checkStreaming proves events arrive before the exit: the command waits
// for a file that the test writes only after seeing the command's first line.
func checkStreaming(t *testing.T, c *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := "echo started; for i in $(seq 1 200); do [ -f /tmp/go ] && break; sleep 0.1; done; [ -f /tmp/go ] && echo released"
	var out strings.Builder
	var events int
	err := c.ExecStream(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", script}}, func(e client.Event) error {
		events++
		if e.Type == "stdout" {
			out.Write(e.Data)
			if strings.Contains(out.String(), "started") && !strings.Contains(out.String(), "released") {
				return c.WriteFile(ctx, id, "/tmp/go", 0o644, strings.NewReader("go"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "started\nreleased\n" {
		t.Errorf("got %q, want the command released by the test", out.String())
	}
	// A command that prints over 2 s arrives in several events.
	events = 0
	err = c.ExecStream(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", "for i in 1 2 3 4 5; do echo $i; sleep 0.5; done"}}, func(e client.Event) error {
		if e.Type == "stdout" {
			events++
		}
		return nil
	})
	if err != nil || events < 3 {
		t.Errorf("got %d stdout events (err %v), want one per line", events, err)
	}
}

func checkBadInput(t *testing.T, c *client.Client, id string) {
	ctx := context.Background()
	_, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"/no/such/binary"}})
	wantAPIError(t, "missing binary", err, 422)
	if r := mustExec(t, c, id, "echo", "still usable"); r.Stdout != "still usable\n" {
		t.Errorf("after a failed exec: got %q", r.Stdout)
	}
	var sink bytes.Buffer
	wantAPIError(t, "dotdot", c.ReadFile(ctx, id, "/etc/../etc/passwd", &sink), 400)
	wantAPIError(t, "missing file", c.ReadFile(ctx, id, "/no/such/file", &sink), 404)
	wantAPIError(t, "directory", c.ReadFile(ctx, id, "/etc", &sink), 400)
	wantAPIError(t, "unknown sandbox", c.ReadFile(ctx, "sb-nope", "/etc/hostname", &sink), 404)
}

func wantAPIError(t *testing.T, name string, err error, status int) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != status {
		t.Errorf("%s: got %v, want HTTP %d", name, err, status)
	}
}

// checkBigOutput streams 100 MB and checks hostd's heap stays bounded.
func checkBigOutput(t *testing.T, c *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	const total = 100_000_000
	var n int
	var code int
	err := c.ExecStream(ctx, id, client.ExecRequest{Cmd: []string{"head", "-c", itoa(total), "/dev/zero"}}, func(e client.Event) error {
		switch e.Type {
		case "stdout":
			n += len(e.Data)
		case "exit":
			code, _ = e.ExitStatus()
		}
		return nil
	})
	close(stop)
	if err != nil || n != total || code != 0 {
		t.Fatalf("got %d bytes, exit %d, err %v; want %d", n, code, err, total)
	}
	// Client and hostd share this process; both must stream, not buffer.
	if p := peak.Load(); p > 96<<20 {
		t.Errorf("heap in use peaked at %d MiB while streaming 100 MB", p>>20)
	}
	t.Logf("heap in use peaked at %d MiB", peak.Load()>>20)
}

func checkDeleteDuringExec(t *testing.T, c *client.Client, sb client.Sandbox, data string) {
	ctx := context.Background()
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sleep", "600"}}, func(e client.Event) error {
			if e.Type == "start" {
				close(started)
			}
			return nil
		})
	}()
	<-started
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	err := <-errc
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != "sandbox_deleted" {
		t.Errorf("stream ended with %v, want code sandbox_deleted", err)
	}
	checkGone(t, c, sb.ID, sb.VMPID, data)
}

// checkGone asserts nothing of a sandbox is left: API, process, files.
func checkGone(t *testing.T, c *client.Client, id string, pid int, data string) {
	t.Helper()
	_, err := c.GetSandbox(context.Background(), id)
	wantAPIError(t, "get after delete", err, http.StatusNotFound)
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("qemu pid %d still exists: %v", pid, err)
	}
	if _, err := os.Stat(filepath.Join(data, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir left: %v", err)
	}
}

func checkKilledVM(t *testing.T, c *client.Client, data string) {
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(sb.VMPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == "failed" {
			if got.Error == "" {
				t.Error("failed sandbox has no error")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %q 30 s after the vm was killed", got.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A failed sandbox keeps its disk until it is deleted.
	if disks, _ := filepath.Glob(filepath.Join(data, "sandboxes", sb.ID, "disk*.qcow2")); len(disks) == 0 {
		t.Errorf("the failed sandbox's overlay is gone")
	}
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
	wantAPIError(t, "exec on a failed sandbox", err, http.StatusConflict)
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	checkGone(t, c, sb.ID, sb.VMPID, data)
}

func itoa(i int) string { return strconv.Itoa(i) }

func hexOf(b []byte) string { return hex.EncodeToString(b) }
