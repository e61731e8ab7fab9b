//go:build vm

package mcp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/gateway/gatewaytest"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/hostdtest"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// realHostd runs hostd in-process (QEMU, TCG) on a fresh data dir, stopped
// when the test ends, and returns a client of it.
func realHostd(t *testing.T) *client.Client {
	t.Helper()
	h := hostdtest.Start(t, vmmtest.ShortTempDir(t))
	t.Cleanup(h.Stop)
	return h.Client
}

// call calls a tool and decodes its structured result into out.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		b, _ := json.Marshal(res.Content)
		t.Fatalf("%s: tool error: %s", name, b)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: decode %s: %v", name, b, err)
	}
}

// TestMCPOverStdio runs the real server code on a pipe pair (the stdio
// transport's framing) against a real hostd, with the SDK's client.
func TestMCPOverStdio(t *testing.T) {
	h := hostdtest.Start(t, vmmtest.ShortTempDir(t), func(c *hostd.Config) { c.APIKey = gatewaytest.Token("mcp-host") })
	t.Cleanup(h.Stop)
	t.Run("hostd", func(t *testing.T) { mcpOverStdio(t, h.Client) })
	// Once more through the fleet's control plane (a fleet of this host).
	gw, err := client.New(gatewaytest.Front(t, "mcp-host", h.URL), gatewaytest.AdminKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("fleet", func(t *testing.T) { mcpOverStdio(t, gw) })
}

func mcpOverStdio(t *testing.T, c *client.Client) {
	ctx := context.Background()
	cr, sw := io.Pipe() // server -> client
	sr, cw := io.Pipe() // client -> server
	served := make(chan error, 1)
	go func() { served <- ServeStdio(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)), sr, sw) }()
	cl := mcp.NewClient(&mcp.Implementation{Name: "vm-test", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var closed bool
	t.Cleanup(func() {
		if !closed {
			cs.Close()
			cw.Close()
			<-served
		}
	})

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = tl.InputSchema != nil && tl.Description != ""
	}
	for _, n := range []string{"create_sandbox", "run_command", "read_output", "read_file", "write_file", "list_files",
		"snapshot_sandbox", "fork_sandbox", "get_service_url", "list_sandboxes", "delete_sandbox", "compare_sandboxes"} {
		if !names[n] {
			t.Errorf("tool %s missing or without schema/description", n)
		}
	}

	var sb sandboxOut
	call(t, cs, "create_sandbox", map[string]any{}, &sb)
	var kept sandboxOut
	call(t, cs, "create_sandbox", map[string]any{"keep": true}, &kept)
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), kept.SandboxID) })

	var run runOut
	call(t, cs, "run_command", map[string]any{"sandbox_id": sb.SandboxID, "cmd": "python3 -c 'print(6*7)'"}, &run)
	if run.Running || run.ExitCode == nil || *run.ExitCode != 0 || run.Stdout != "42\n" {
		t.Errorf("run python: %+v", run)
	}
	// Long output is cut with a marker; read_output reads on from next_offset.
	call(t, cs, "run_command", map[string]any{"sandbox_id": sb.SandboxID, "cmd": "head -c 100000 /dev/zero | tr '\\0' x"}, &run)
	if !run.Truncated || run.NextOffset != maxOutput {
		t.Errorf("long output: truncated=%v next_offset=%d", run.Truncated, run.NextOffset)
	}
	var more runOut
	call(t, cs, "read_output", map[string]any{"sandbox_id": sb.SandboxID, "exec_id": run.ExecID, "offset": run.NextOffset}, &more)
	if len(more.Stdout) != 100000-maxOutput || more.ExitCode == nil {
		t.Errorf("read_output: %d bytes, exit %v", len(more.Stdout), more.ExitCode)
	}

	var wr writeFileOut
	call(t, cs, "write_file", map[string]any{"sandbox_id": sb.SandboxID, "path": "/root/notes/hello.txt", "content": "hi there\n"}, &wr)
	var rd readFileOut
	call(t, cs, "read_file", map[string]any{"sandbox_id": sb.SandboxID, "path": "/root/notes/hello.txt"}, &rd)
	if rd.Content != "hi there\n" {
		t.Errorf("read_file: %+v", rd)
	}
	var ls listFilesOut
	call(t, cs, "list_files", map[string]any{"sandbox_id": sb.SandboxID, "path": "/root/notes"}, &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Name != "hello.txt" {
		t.Errorf("list_files: %+v", ls)
	}

	var fork forkOut
	call(t, cs, "fork_sandbox", map[string]any{"sandbox_id": sb.SandboxID}, &fork)
	if len(fork.SandboxIDs) != 1 {
		t.Fatalf("fork: %+v", fork)
	}
	call(t, cs, "read_file", map[string]any{"sandbox_id": fork.SandboxIDs[0], "path": "/root/notes/hello.txt"}, &rd)
	if rd.Content != "hi there\n" {
		t.Errorf("fork's file: %+v", rd)
	}
	var del deleteOut
	call(t, cs, "delete_sandbox", map[string]any{"sandbox_id": fork.SandboxIDs[0]}, &del)

	// The session ends: the sandbox not kept goes, the kept one stays.
	cs.Close()
	cw.Close()
	closed = true
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the server did not end with its session")
	}
	list, err := c.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, s := range list {
		left[s.ID] = true
	}
	if left[sb.SandboxID] || left[fork.SandboxIDs[0]] || !left[kept.SandboxID] {
		t.Errorf("after the session: %v (want only the kept %s)", left, kept.SandboxID)
	}
}
