package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/api/blueprinttest"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// runHost runs the CLI against a blueprinttest host, which keeps snapshots
// and templates.
func runHost(t *testing.T, h *blueprinttest.Host, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"agentbox", "--url", h.URL, "--api-key", blueprinttest.Key}, args...)
	code := Run(context.Background(), full, IO{In: strings.NewReader(""), Out: &out, Err: &errb})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func hostSandbox(t *testing.T, h *blueprinttest.Host, opts sandbox.CreateOptions) string {
	t.Helper()
	sb, err := h.Create(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

func TestSnapshotCommands(t *testing.T) {
	h := blueprinttest.New(t)
	id := hostSandbox(t, h, sandbox.CreateOptions{})

	got := runHost(t, h, "snapshot", "create", id)
	sn1 := strings.TrimSpace(got.stdout)
	if got.code != 0 || sn1 == "" {
		t.Fatalf("snapshot create: got %+v", got)
	}
	got = runHost(t, h, "create", "--snapshot", sn1)
	child := strings.TrimSpace(got.stdout)
	if got.code != 0 || child == "" {
		t.Fatalf("create --snapshot: got %+v", got)
	}
	got = runHost(t, h, "--json", "snapshot", "create", child, "--stay-paused")
	var sn2 client.Snapshot
	if err := json.Unmarshal([]byte(got.stdout), &sn2); err != nil || sn2.ParentID != sn1 {
		t.Fatalf("snapshot create --json: got %q, %v, want a child of %s", got.stdout, err, sn1)
	}

	tests := []struct {
		name string
		args []string
		code int
		want []string // substrings of stdout
	}{
		{"ls", []string{"snapshot", "ls"}, 0, []string{"ID", "KIND", sn1, sn2.ID, "sandbox " + child}},
		{"ls -q", []string{"snapshot", "ls", "-q"}, 0, []string{sn1 + "\n" + sn2.ID + "\n"}},
		{"show", []string{"snapshot", "show", sn2.ID}, 0, []string{"parent:", "lineage:    base > " + sn1 + " > " + sn2.ID + "\n", "used by:    -\n"}},
		{"show used", []string{"snapshot", "show", sn1}, 0, []string{"used by:    sandbox " + child + ", snapshot " + sn2.ID}},
		{"show json", []string{"--json", "snapshot", "show", sn2.ID}, 0, []string{`"ancestors": [`, `"parent_id": "` + sn1 + `"`}},
		{"rm in use", []string{"snapshot", "rm", sn1}, 1, nil},
		{"rm", []string{"snapshot", "rm", sn2.ID}, 0, []string{sn2.ID + "\n"}},
		{"rm nothing", []string{"snapshot", "rm"}, 1, nil},
		{"show missing", []string{"snapshot", "show", "sn-none"}, 1, nil},
		{"create without id", []string{"snapshot", "create"}, 1, nil},
		{"unknown flag", []string{"snapshot", "create", "--nope", id}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := runHost(t, h, tc.args...)
			if got.code != tc.code {
				t.Errorf("exit code: got %d, want %d (stderr %q)", got.code, tc.code, got.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.stdout, w) {
					t.Errorf("stdout: got %q, want it to contain %q", got.stdout, w)
				}
			}
		})
	}
	var list client.SnapshotList
	got = runHost(t, h, "--json", "snapshot", "ls")
	if err := json.Unmarshal([]byte(got.stdout), &list); err != nil || len(list.Snapshots) != 1 {
		t.Errorf("snapshot ls --json after rm: got %q, %v, want one snapshot", got.stdout, err)
	}
}

func TestForkPauseResume(t *testing.T) {
	h := blueprinttest.New(t)
	id := hostSandbox(t, h, sandbox.CreateOptions{})
	ctx := context.Background()

	got := runHost(t, h, "fork", "-n", "3", id)
	if lines := strings.Fields(got.stdout); got.code != 0 || len(lines) != 3 {
		t.Errorf("fork -n 3: got %+v, want 3 ids", got)
	}
	got = runHost(t, h, "--json", "fork", id)
	var list client.SandboxList
	if err := json.Unmarshal([]byte(got.stdout), &list); err != nil || len(list.Sandboxes) != 1 {
		t.Errorf("fork --json: got %q, %v, want one sandbox", got.stdout, err)
	}

	if got := runHost(t, h, "pause", id); got.code != 0 || got.stdout != id+"\n" {
		t.Errorf("pause: got %+v", got)
	}
	if info, _ := h.Get(ctx, id); info.State != sandbox.StatePaused {
		t.Errorf("state after pause: got %v, want paused", info.State)
	}
	got = runHost(t, h, "--json", "resume", id)
	var sb client.Sandbox
	if err := json.Unmarshal([]byte(got.stdout), &sb); err != nil || sb.State != client.SandboxStateRunning {
		t.Errorf("resume --json: got %q, %v, want running", got.stdout, err)
	}
	for _, args := range [][]string{{"pause"}, {"resume", "a", "b"}, {"fork"}, {"pause", "sb-none"}} {
		if got := runHost(t, h, args...); got.code != 1 || got.stderr == "" {
			t.Errorf("%v: got %+v, want exit 1 with a message", args, got)
		}
	}
}

func TestCreateFrom(t *testing.T) {
	h := blueprinttest.New(t)
	ctx := context.Background()
	sn, err := h.Snapshot(ctx, hostSandbox(t, h, sandbox.CreateOptions{}), sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.CreateTemplate(ctx, "py", sn.ID, 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want sandbox.CreateOptions
	}{
		{"snapshot", []string{"create", "--snapshot", sn.ID}, 0, sandbox.CreateOptions{Snapshot: sn.ID}},
		{"template", []string{"create", "--template", "py"}, 0, sandbox.CreateOptions{Template: "py"}},
		{"both", []string{"create", "--template", "py", "--snapshot", sn.ID}, 1, sandbox.CreateOptions{}},
		{"unknown snapshot", []string{"create", "--snapshot", "sn-none"}, 1, sandbox.CreateOptions{Snapshot: "sn-none"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.Reset()
			got := runHost(t, h, tc.args...)
			if got.code != tc.code {
				t.Errorf("exit code: got %d, want %d (stderr %q)", got.code, tc.code, got.stderr)
			}
			creates := h.Creates()
			if tc.want.Snapshot == "" && tc.want.Template == "" {
				if len(creates) != 0 {
					t.Errorf("creates: got %+v, want none", creates)
				}
				return
			}
			if len(creates) != 1 || creates[0].Snapshot != tc.want.Snapshot || creates[0].Template != tc.want.Template {
				t.Errorf("creates: got %+v, want %+v", creates, tc.want)
			}
		})
	}
}
