package mcp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/api/blueprinttest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func fakeClient(t *testing.T) *client.Client {
	h := blueprinttest.New(t)
	c, err := client.New(h.URL, blueprinttest.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func create(t *testing.T, cs *mcp.ClientSession, keep bool) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{"keep": keep}})
	if err != nil || res.IsError {
		t.Fatalf("create_sandbox: %v %+v", err, res)
	}
	var out sandboxOut
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	return out.SandboxID
}

func ids(t *testing.T, c *client.Client) string {
	sbs, err := c.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return strings.Join(out, ",")
}

func TestStdioSessionEndDeletesUnkept(t *testing.T) {
	c := fakeClient(t)
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- ServeStdio(context.Background(), c, quiet, sr, sw) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	create(t, cs, false)
	kept := create(t, cs, true)
	cs.Close()
	cw.Close()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
	if got := ids(t, c); got != kept {
		t.Errorf("after the session: %q, want only %q", got, kept)
	}
}

func TestHTTPSessionEndDeletesUnkept(t *testing.T) {
	c := fakeClient(t)
	h, err := NewHandler("k", c, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearer{"k"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	create(t, cs, false)
	kept := create(t, cs, true)
	cs.Close() // ends the HTTP session
	h.Close()  // waits for its cleanup
	if got := ids(t, c); got != kept {
		t.Errorf("after the session: %q, want only %q", got, kept)
	}
}
