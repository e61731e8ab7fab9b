package mcp

import (
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/store"
)

// TestMCPStaysInItsKeysProject: the MCP server speaks the API with its
// key, so its tools see and reach only that key's project.
func TestMCPStaysInItsKeysProject(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(api.New(api.Options{Manager: apitest.NewManager(), Auth: auth.New(st), Tenancy: st}))
	defer srv.Close()
	clientOf := func(project string) *client.Client {
		if _, err := st.CreateProject(ctx, project); err != nil {
			t.Fatal(err)
		}
		key, rec, err := auth.NewRecord("", project, store.RoleMember, time.Time{})
		if err == nil {
			err = st.CreateAPIKey(ctx, rec, auth.Hash(key))
		}
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(srv.URL, key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alpha, beta := clientOf("alpha"), clientOf("beta")
	sb, err := alpha.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}

	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- ServeStdio(ctx, beta, quiet, sr, sw) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); cw.Close(); <-served }()
	text := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_sandboxes", Arguments: map[string]any{}})
	if err != nil || res.IsError || strings.Contains(text(res), sb.ID) {
		t.Errorf("beta's list_sandboxes: got %v %s, want no %s", err, text(res), sb.ID)
	}
	for _, call := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"sandbox_id": sb.ID, "path": "/etc/hostname"}},
		{"run_command", map[string]any{"sandbox_id": sb.ID, "cmd": "id"}},
		{"fork_sandbox", map[string]any{"sandbox_id": sb.ID}},
		{"delete_sandbox", map[string]any{"sandbox_id": sb.ID}},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: call.tool, Arguments: call.args})
		if err != nil || !res.IsError || !strings.Contains(text(res), "not found") {
			t.Errorf("beta's %s on alpha's sandbox: got %v %s, want a not-found error", call.tool, err, text(res))
		}
	}
	if _, err := alpha.GetSandbox(ctx, sb.ID); err != nil {
		t.Errorf("alpha's sandbox after beta's calls: %v", err)
	}
}
