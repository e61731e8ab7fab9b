package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

const testKey = "ab_client-test"

// newTestClient serves the real API handler over a fake manager.
func newTestClient(t *testing.T) (*client.Client, *apitest.Manager, string) {
	t.Helper()
	m := apitest.NewManager()
	srv := httptest.NewServer(api.New(api.Options{
		Manager: m,
		Auth:    auth.New(apitest.NewKeys(auth.Hash(testKey))),
		Health:  func() api.HealthInfo { return api.HealthInfo{VMM: "qemu", Accel: "tcg"} },
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return c, m, srv.URL
}

func TestSandboxLifecycle(t *testing.T) {
	ctx := context.Background()
	c, _, _ := newTestClient(t)
	h, err := c.Health(ctx)
	if err != nil || h.VMM != "qemu" || h.Status != "ok" {
		t.Fatalf("health: got %+v, %v", h, err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 2, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.VCPUs != 2 || sb.Metadata["k"] != "v" || sb.State != client.SandboxStateRunning {
		t.Errorf("create: got %+v", sb)
	}
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.ID != sb.ID {
		t.Errorf("get: got %+v, %v", got, err)
	}
	list, err := c.ListSandboxes(ctx)
	if err != nil || len(list) != 1 {
		t.Errorf("list: got %+v, %v", list, err)
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSandbox(ctx, sb.ID)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != "sandbox_not_found" {
		t.Errorf("get deleted: got %v, want APIError 404 sandbox_not_found", err)
	}
}

func TestWrongKey(t *testing.T) {
	_, _, url := newTestClient(t)
	c, err := client.New(url, "ab_wrong")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListSandboxes(context.Background())
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.Code != "unauthorized" {
		t.Errorf("got %v, want APIError 401 unauthorized", err)
	}
}

func TestExec(t *testing.T) {
	ctx := context.Background()
	c, m, _ := newTestClient(t)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "hi"}})
	if err != nil || res.Stdout != "hi\n" || res.ExitCode != 0 {
		t.Errorf("exec: got %+v, %v", res, err)
	}

	m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		return fmt.Errorf("start %s: %w", req.Cmd[0], sandbox.ErrExecStart)
	})
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"nope"}})
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 422 || apiErr.Code != "exec_failed" {
		t.Errorf("exec of a missing binary: got %v, want APIError 422 exec_failed", err)
	}
}

// TestExecBytes: a collected exec's output that is not UTF-8 comes back
// as its exact bytes (StdoutBytes), its text with U+FFFD (issue 38 #11).
func TestExecBytes(t *testing.T) {
	ctx := context.Background()
	c, m, _ := newTestClient(t)
	sb, _ := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	bin := []byte{0x7f, 'E', 'L', 'F', 0xff, 0xfe, 0, 1}
	m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		return apitest.EmitAll(emit,
			sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e9"},
			sandbox.ExecEvent{Type: sandbox.EventStdout, Data: bin},
			sandbox.ExecEvent{Type: sandbox.EventStderr, Data: []byte("w\u00e4rn\n")},
			sandbox.ExecEvent{Type: sandbox.EventExit})
	})
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.StdoutBytes(); !bytes.Equal(got, bin) {
		t.Errorf("stdout bytes: got %q, want %q", got, bin)
	}
	if want := "\x7fELF\ufffd\ufffd\x00\x01"; res.Stdout != want {
		t.Errorf("stdout: got %q, want %q", res.Stdout, want)
	}
	if got := res.StderrBytes(); string(got) != "w\u00e4rn\n" || res.StderrB64 != nil {
		t.Errorf("stderr: got %q (b64 %q), want the text and no b64", got, res.StderrB64)
	}
}

func TestExecStream(t *testing.T) {
	ctx := context.Background()
	c, m, _ := newTestClient(t)
	sb, _ := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	big := bytes.Repeat([]byte{0, 1, 2, 0xff}, 1<<20) // 4 MiB: several max-size events
	m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		return apitest.EmitAll(emit,
			sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e9"},
			sandbox.ExecEvent{Type: sandbox.EventStdout, Data: big},
			sandbox.ExecEvent{Type: sandbox.EventStderr, Data: []byte("warn\n")},
			sandbox.ExecEvent{Type: sandbox.EventExit, ExitCode: -1, Signal: "SIGKILL"})
	})
	var stdout, stderr bytes.Buffer
	var types []string
	var code int
	var sig string
	err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat"}}, func(ev client.Event) error {
		if len(types) == 0 || types[len(types)-1] != string(ev.Type) {
			types = append(types, string(ev.Type))
		}
		switch ev.Type {
		case client.ExecEventTypeStdout:
			stdout.Write(ev.Data)
		case client.ExecEventTypeStderr:
			stderr.Write(ev.Data)
		case client.ExecEventTypeExit:
			code, sig = ev.ExitStatus()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(types, ","), "start,stdout,stderr,exit"; got != want {
		t.Errorf("events: got %v, want %v", got, want)
	}
	if !bytes.Equal(stdout.Bytes(), big) || stderr.String() != "warn\n" {
		t.Errorf("output: got %d bytes and %q, want %d bytes and warn", stdout.Len(), stderr.String(), len(big))
	}
	if code != -1 || sig != "SIGKILL" {
		t.Errorf("exit: got %d %q, want -1 SIGKILL", code, sig)
	}
}

func TestExecStreamDeleted(t *testing.T) {
	ctx := context.Background()
	c, m, _ := newTestClient(t)
	sb, _ := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	m.SetExec(func(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"}); err != nil {
			return err
		}
		return sandbox.ErrDeleted
	})
	err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sleep", "9"}}, func(client.Event) error { return nil })
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "sandbox_deleted" || apiErr.Status != 0 {
		t.Errorf("got %v, want in-stream APIError sandbox_deleted", err)
	}
}

func TestReadEventsErrors(t *testing.T) {
	tests := []struct {
		name, body string
		want       error
	}{
		{"ends before exit", `{"type":"start","exec_id":"e1"}` + "\n", io.ErrUnexpectedEOF},
		{"line too long", `{"type":"stdout","data":"` + strings.Repeat("A", 5<<20) + `"}` + "\n", nil},
		{"not JSON", "hello\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := client.ReadEventsForTest(strings.NewReader(tc.body), func(client.Event) error { return nil })
			if err == nil {
				t.Fatal("got nil, want an error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestFiles(t *testing.T) {
	ctx := context.Background()
	c, m, _ := newTestClient(t)
	sb, _ := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	data := bytes.Repeat([]byte("agentbox"), 1<<17) // 1 MiB
	if err := c.WriteFile(ctx, sb.ID, "/data.bin", 0o755|fs.ModeSetgid, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if f, _ := m.File("/data.bin"); f.Mode != 0o755|fs.ModeSetgid {
		t.Errorf("mode: got %v, want %v", f.Mode, 0o755|fs.ModeSetgid)
	}
	var got bytes.Buffer
	if err := c.ReadFile(ctx, sb.ID, "/data.bin", &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Errorf("read: got %d bytes, %v, want %d", got.Len(), err, len(data))
	}
	fi, err := c.Stat(ctx, sb.ID, "/data.bin")
	if err != nil || fi.Size != int64(len(data)) || fi.Mode != 0o2755 {
		t.Errorf("stat: got %+v, %v", fi, err)
	}
	if err := c.Mkdir(ctx, sb.ID, "/d/e"); err != nil {
		t.Fatal(err)
	}
	if err := c.Move(ctx, sb.ID, "/data.bin", "/d/data.bin"); err != nil {
		t.Fatal(err)
	}
	entries, err := c.ListDir(ctx, sb.ID, "/d")
	if err != nil || len(entries) != 2 {
		t.Errorf("list: got %+v, %v, want data.bin and e", entries, err)
	}
	if err := c.Remove(ctx, sb.ID, "/d/data.bin", false); err != nil {
		t.Fatal(err)
	}
	err = c.ReadFile(ctx, sb.ID, "/d/data.bin", io.Discard)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "file_not_found" {
		t.Errorf("read removed: got %v, want file_not_found", err)
	}
	err = c.ReadFile(ctx, sb.ID, "relative", io.Discard)
	if !errors.As(err, &apiErr) || apiErr.Code != "bad_path" {
		t.Errorf("read relative: got %v, want bad_path", err)
	}
}

func TestReadFileBrokenTransfer(t *testing.T) {
	ctx := context.Background()
	c, m, _ := newTestClient(t)
	sb, _ := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	m.SetReadFile(func(string) (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(strings.NewReader(strings.Repeat("x", 256<<10)), iotest.ErrReader(errors.New("channel reset")))), nil
	})
	if err := c.ReadFile(ctx, sb.ID, "/big", io.Discard); err == nil {
		t.Error("broken transfer: got nil error, want one")
	}
}

func TestLoadAPIKey(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, client.KeyFile), []byte("ab_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, envKey, dataDir, want string
		wantErr                     error
	}{
		{"env wins", "ab_env", dir, "ab_env", nil},
		{"key file", "", dir, "ab_fromfile", nil},
		{"nothing", "", filepath.Join(dir, "missing"), "", client.ErrNoAPIKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AGENTBOX_API_KEY", tc.envKey)
			t.Setenv("AGENTBOX_DATA_DIR", tc.dataDir)
			got, err := client.LoadAPIKey()
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("got %q, %v, want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	_, _, url := newTestClient(t)
	t.Setenv("AGENTBOX_URL", url)
	t.Setenv("AGENTBOX_API_KEY", testKey)
	c, err := client.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSandboxes(context.Background()); err != nil {
		t.Errorf("list: got %v, want nil", err)
	}
}
