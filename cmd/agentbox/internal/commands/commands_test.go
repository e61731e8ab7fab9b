package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/internal/waitfor"
)

const testKey = "ab_cli-test"

// cliEnv is a real API handler over a fake manager whose exec understands
// a few commands: echo ARGS, err TEXT, exit N, kill, cat (stdin), pwd
// (cwd), getenv NAME, and anything else fails to start.
type cliEnv struct {
	m   *apitest.Manager
	url string
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	m := apitest.NewManager()
	m.SetExec(fakeExec)
	srv := httptest.NewServer(api.New(api.Options{Manager: m, Auth: auth.New(apitest.NewKeys(auth.Hash(testKey)))}))
	t.Cleanup(srv.Close)
	return &cliEnv{m: m, url: srv.URL}
}

func fakeExec(ctx context.Context, id string, req sandbox.ExecRequest, emit func(sandbox.ExecEvent) error) error {
	var evs []sandbox.ExecEvent
	out := func(typ sandbox.EventType, s string) {
		evs = append(evs, sandbox.ExecEvent{Type: typ, Data: []byte(s)})
	}
	exit := sandbox.ExecEvent{Type: sandbox.EventExit}
	arg := strings.Join(req.Cmd[1:], " ")
	switch req.Cmd[0] {
	case "echo":
		out(sandbox.EventStdout, arg+"\n")
	case "err":
		out(sandbox.EventStderr, arg+"\n")
	case "exit":
		exit.ExitCode, _ = strconv.Atoi(arg)
	case "kill":
		exit.ExitCode, exit.Signal = -1, "SIGKILL"
	case "cat":
		out(sandbox.EventStdout, string(req.Stdin))
	case "pwd":
		out(sandbox.EventStdout, req.Cwd+"\n")
	case "getenv":
		out(sandbox.EventStdout, req.Env[arg]+"\n")
	case "block":
		if err := emit(sandbox.ExecEvent{Type: sandbox.EventStart, ExecID: "e1"}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	default:
		return fmt.Errorf("%s: %w", req.Cmd[0], sandbox.ErrExecStart)
	}
	evs = append([]sandbox.ExecEvent{{Type: sandbox.EventStart, ExecID: "e1"}}, append(evs, exit)...)
	return apitest.EmitAll(emit, evs...)
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs the CLI against env with stdin in.
func (e *cliEnv) run(t *testing.T, ctx context.Context, in string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"agentbox", "--url", e.url, "--api-key", testKey}, args...)
	code := Run(ctx, full, IO{In: strings.NewReader(in), Out: &out, Err: &errb})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (e *cliEnv) create(t *testing.T) string {
	t.Helper()
	sb, err := e.m.Create(context.Background(), sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

func TestExecExitCode(t *testing.T) {
	env := newCLIEnv(t)
	id := env.create(t)
	tests := []struct {
		name      string
		args      []string
		code      int
		stdout    string
		stderrHas string
	}{
		{"success", []string{"exec", id, "--", "echo", "hi"}, 0, "hi\n", ""},
		{"without --", []string{"exec", id, "echo", "-n", "x"}, 0, "-n x\n", ""},
		{"exit code passes through", []string{"exec", id, "--", "exit", "3"}, 3, "", ""},
		{"large exit code", []string{"exec", id, "exit", "255"}, 255, "", ""},
		{"killed by signal", []string{"exec", id, "kill"}, 137, "", ""},
		{"stderr", []string{"exec", id, "err", "oops"}, 0, "", "oops\n"},
		{"cannot start", []string{"exec", id, "nope"}, 1, "", "exec_failed"},
		{"unknown sandbox", []string{"exec", "sb-none", "echo"}, 1, "", "sandbox_not_found"},
		{"no command", []string{"exec", id}, 1, "", "give a sandbox id and a command"},
		{"cwd", []string{"exec", "--cwd", "/tmp", id, "pwd"}, 0, "/tmp\n", ""},
		{"env", []string{"exec", "--env", "A=1,2", id, "getenv", "A"}, 0, "1,2\n", ""},
		{"json", []string{"--json", "exec", id, "exit", "4"}, 4, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := env.run(t, context.Background(), "", tc.args...)
			if got.code != tc.code {
				t.Errorf("exit code: got %d, want %d (stderr %q)", got.code, tc.code, got.stderr)
			}
			if tc.stdout != "" && got.stdout != tc.stdout {
				t.Errorf("stdout: got %q, want %q", got.stdout, tc.stdout)
			}
			if !strings.Contains(got.stderr, tc.stderrHas) {
				t.Errorf("stderr: got %q, want it to contain %q", got.stderr, tc.stderrHas)
			}
		})
	}
}

func TestExecJSONOutput(t *testing.T) {
	env := newCLIEnv(t)
	id := env.create(t)
	got := env.run(t, context.Background(), "", "exec", "--json", id, "echo", "hi")
	var res client.ExecResult
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil {
		t.Fatalf("stdout %q: %v", got.stdout, err)
	}
	if res.Stdout != "hi\n" || res.ExitCode != 0 || got.code != 0 {
		t.Errorf("got %+v, code %d", res, got.code)
	}
}

func TestExecStdin(t *testing.T) {
	env := newCLIEnv(t)
	id := env.create(t)
	if got := env.run(t, context.Background(), "piped\n", "exec", id, "cat"); got.stdout != "piped\n" {
		t.Errorf("stdin: got %q, want piped", got.stdout)
	}
	if got := env.run(t, context.Background(), "piped\n", "exec", "-n", id, "cat"); got.stdout != "" {
		t.Errorf("stdin with -n: got %q, want nothing", got.stdout)
	}
}

func TestCreateLsRm(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	got := env.run(t, ctx, "", "create", "--vcpus", "2", "--env", "A=1,2", "--metadata", "team=ml", "--timeout", "90s")
	id := strings.TrimSpace(got.stdout)
	if got.code != 0 || id == "" {
		t.Fatalf("create: got %+v", got)
	}
	info, err := env.m.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if info.VCPUs != 2 || info.Env["A"] != "1,2" || info.Metadata["team"] != "ml" || info.TimeoutS != 90 {
		t.Errorf("created: got %+v", info)
	}

	got = env.run(t, ctx, "", "ls")
	if !strings.HasPrefix(got.stdout, "ID") || !strings.Contains(got.stdout, id) || !strings.Contains(got.stdout, "running") {
		t.Errorf("ls: got %q", got.stdout)
	}
	got = env.run(t, ctx, "", "--json", "ls")
	var list client.SandboxList
	if err := json.Unmarshal([]byte(got.stdout), &list); err != nil || len(list.Sandboxes) != 1 {
		t.Errorf("ls --json: got %q, %v", got.stdout, err)
	}

	got = env.run(t, ctx, "", "rm", id, "sb-none")
	if got.code != 1 || got.stdout != id+"\n" || !strings.Contains(got.stderr, "sb-none") {
		t.Errorf("rm: got %+v, want %s removed and sb-none reported", got, id)
	}
	if got := env.run(t, ctx, "", "ls", "-q"); got.stdout != "" {
		t.Errorf("ls -q after rm: got %q, want nothing", got.stdout)
	}
}

func TestRunDeletesSandbox(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"success", []string{"run", "--", "echo", "hi"}, 0},
		{"exit code", []string{"run", "--memory", "1024", "exit", "5"}, 5},
		{"cannot start", []string{"run", "nope"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newCLIEnv(t)
			got := env.run(t, context.Background(), "", tc.args...)
			if got.code != tc.code {
				t.Errorf("exit code: got %d, want %d (stderr %q)", got.code, tc.code, got.stderr)
			}
			if left, _ := env.m.List(context.Background()); len(left) != 0 {
				t.Errorf("sandboxes left: got %d, want 0", len(left))
			}
		})
	}
}

func TestRunInterrupted(t *testing.T) {
	env := newCLIEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result)
	go func() { done <- env.run(t, ctx, "", "run", "block") }()
	// Wait for the command to start, then "press Ctrl-C".
	waitfor.Cond(t, "the command's Exec", func() bool {
		calls := env.m.Calls()
		return len(calls) > 0 && calls[len(calls)-1] == "Exec"
	})
	cancel()
	got := <-done
	if got.code != 130 {
		t.Errorf("exit code: got %d, want 130 (stderr %q)", got.code, got.stderr)
	}
	if left, _ := env.m.List(context.Background()); len(left) != 0 {
		t.Errorf("sandboxes left after Ctrl-C: got %d, want 0", len(left))
	}
}

func TestCp(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	id := env.create(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "tool.sh")
	if err := os.WriteFile(local, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := env.m.Mkdir(ctx, id, "/root"); err != nil {
		t.Fatal(err)
	}

	if got := env.run(t, ctx, "", "cp", local, id+":/root"); got.code != 0 {
		t.Fatalf("upload into a directory: %+v", got)
	}
	f, ok := env.m.File("/root/tool.sh")
	if !ok || string(f.Data) != "#!/bin/sh\n" || f.Mode != 0o755 {
		t.Errorf("uploaded: got %+v, %v", f, ok)
	}
	if got := env.run(t, ctx, "from stdin", "cp", "-", id+":/root/in.txt"); got.code != 0 {
		t.Fatalf("upload from stdin: %+v", got)
	}
	if f, _ := env.m.File("/root/in.txt"); string(f.Data) != "from stdin" {
		t.Errorf("uploaded from stdin: got %q", f.Data)
	}

	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if got := env.run(t, ctx, "", "cp", id+":/root/tool.sh", out); got.code != 0 {
		t.Fatalf("download into a directory: %+v", got)
	}
	b, err := os.ReadFile(filepath.Join(out, "tool.sh"))
	if err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("downloaded: got %q, %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(out, "tool.sh")); fi.Mode().Perm() != 0o755 {
		t.Errorf("downloaded mode: got %v, want 0755", fi.Mode().Perm())
	}
	if got := env.run(t, ctx, "", "cp", id+":/root/in.txt", "-"); got.stdout != "from stdin" {
		t.Errorf("download to stdout: got %q", got.stdout)
	}

	got := env.run(t, ctx, "", "cp", id+":/root/missing", filepath.Join(out, "missing"))
	if got.code != 1 || !strings.Contains(got.stderr, "file_not_found") {
		t.Errorf("download of a missing file: got %+v", got)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("local dir after a failed download: got %d entries, want 1", len(entries))
	}
	if got := env.run(t, ctx, "", "cp", local, filepath.Join(dir, "x")); got.code != 1 {
		t.Errorf("local to local: got code %d, want 1", got.code)
	}
}

func TestParseCPArg(t *testing.T) {
	tests := []struct {
		in   string
		want cpArg
	}{
		{"sb-1:/root/x", cpArg{id: "sb-1", path: "/root/x"}},
		{"sb-1:/", cpArg{id: "sb-1", path: "/"}},
		{"/tmp/x", cpArg{path: "/tmp/x"}},
		{"./a:/b", cpArg{path: "./a:/b"}},
		{"sb-1:relative", cpArg{path: "sb-1:relative"}},
		{"-", cpArg{path: "-"}},
		{":/x", cpArg{path: ":/x"}},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := parseCPArg(tc.in); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		code int
		sig  string
		want int
	}{
		{0, "", 0}, {1, "", 1}, {-1, "SIGKILL", 137}, {-1, "SIGTERM", 143}, {-1, "INT", 130}, {300, "", 255},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.code, tc.sig), func(t *testing.T) {
			got := 0
			if err := exitStatus(tc.code, tc.sig); err != nil {
				got = err.(*ExitError).Code
			}
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCpRecursive(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	id := env.create(t)
	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "x.py"), []byte("print(1)\n"), 0o600)
	if got := env.run(t, ctx, "", "cp", "-r", src, id+":/srv/proj"); got.code != 0 {
		t.Fatalf("upload dir: %+v", got)
	}
	if f, ok := env.m.File("/srv/proj/sub/x.py"); !ok || string(f.Data) != "print(1)\n" || f.Mode != 0o600 {
		t.Errorf("uploaded: %+v %v", f, ok)
	}
	if got := env.run(t, ctx, "", "cp", src, id+":/srv/other"); got.code != 1 || !strings.Contains(got.stderr, "-r") {
		t.Errorf("dir without -r: %+v", got)
	}
	out := t.TempDir()
	if got := env.run(t, ctx, "", "cp", "-r", id+":/srv/proj", out); got.code != 0 {
		t.Fatalf("download dir: %+v", got)
	}
	if b, err := os.ReadFile(filepath.Join(out, "proj", "sub", "x.py")); err != nil || string(b) != "print(1)\n" {
		t.Errorf("downloaded: %q %v", b, err)
	}
}

func TestWatch(t *testing.T) {
	env := newCLIEnv(t)
	id := env.create(t)
	env.m.Mkdir(context.Background(), id, "/w")
	env.m.SetWatch(sandbox.WatchEvent{Type: "rename", Path: "/w/b", OldPath: "/w/a", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	// The watch runs until interrupted; the deadline stands for Ctrl-C.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got := env.run(t, ctx, "", "watch", id, "/w")
	if !strings.Contains(got.stdout, "rename /w/b (from /w/a)") {
		t.Errorf("watch printed %q", got.stdout)
	}
	if got := env.run(t, context.Background(), "", "watch", id); got.code != 2 {
		t.Errorf("watch without a directory: code %d, want 2", got.code)
	}
}
