//go:build vm

package mcp

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/hostdtest"
	"github.com/agentbox/agentbox/internal/waitfor"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestMCPBinary runs the built `agentbox mcp` as an MCP host runs it: a
// child process spoken to over its real stdin and stdout by the official
// MCP Go SDK's CommandTransport, and `agentbox mcp --http` as a server
// process reached over loopback by the SDK's streamable HTTP client. Both
// drive one real hostd; each session creates a sandbox, runs python3 in
// it, and its end deletes the sandbox.
func TestMCPBinary(t *testing.T) {
	h := hostdtest.Start(t, vmmtest.ShortTempDir(t))
	t.Cleanup(h.Stop)
	bin := filepath.Join(t.TempDir(), "agentbox")
	build := exec.Command("go", "build", "-o", bin, "github.com/agentbox/agentbox/cmd/agentbox")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build agentbox: %v\n%s", err, out)
	}
	env := append(os.Environ(), "AGENTBOX_URL="+h.URL, "AGENTBOX_API_KEY="+h.Key, "AGENTBOX_DATA_DIR="+t.TempDir())

	t.Run("stdio", func(t *testing.T) {
		cmd := exec.Command(bin, "mcp")
		cmd.Env, cmd.Stderr = env, &logWriter{t: t}
		cl := mcp.NewClient(&mcp.Implementation{Name: "binary-stdio", Version: "1"}, nil)
		cs, err := cl.Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 3 * time.Minute}, nil)
		if err != nil {
			t.Fatal(err)
		}
		id := driveSession(t, cs)
		// Closing the session closes the child's stdin: it ends its session
		// (deleting the sandbox) and exits.
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
			t.Errorf("agentbox mcp exited %v, want 0", cmd.ProcessState)
		}
		assertGone(t, h.Client, id)
	})

	t.Run("http", func(t *testing.T) {
		const httpKey = "mcp-http-key"
		cmd := exec.Command(bin, "mcp", "--http", "127.0.0.1:0", "--http-key", httpKey)
		cmd.Env = env
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{}) // closed once the process is waited for, waitErr set
		var waitErr error
		addrc := make(chan string, 1)
		go func() { // the process's log: its address, then everything to t.Log
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
					addrc <- m[1]
				}
				t.Log("agentbox mcp: " + sc.Text())
			}
			waitErr = cmd.Wait()
			close(done)
		}()
		t.Cleanup(func() {
			select {
			case <-done:
			default:
				cmd.Process.Kill()
				<-done
			}
		})
		var addr string
		select {
		case addr = <-addrc:
		case <-done:
			t.Fatalf("agentbox mcp --http exited: %v", waitErr)
		}
		cl := mcp.NewClient(&mcp.Implementation{Name: "binary-http", Version: "1"}, nil)
		cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + addr,
			HTTPClient: &http.Client{Transport: bearer{httpKey}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		id := driveSession(t, cs)
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		// The session's end (a DELETE of it) deletes its sandbox.
		waitfor.Cond(t, "the HTTP session's sandbox deleted", func() bool { return !sandboxExists(t, h.Client, id) })
		// SIGTERM ends the server cleanly.
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-done
		if waitErr != nil {
			t.Errorf("agentbox mcp --http after SIGTERM: %v, want exit 0", waitErr)
		}
	})
}

var addrRE = regexp.MustCompile(`streamable HTTP" addr=(\S+)`)

// driveSession lists the tools, creates a sandbox and runs python3 in it,
// and returns the sandbox's id.
func driveSession(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) < 10 {
		t.Errorf("got %d tools, want the 11 of the server", len(tools.Tools))
	}
	var sb sandboxOut
	call(t, cs, "create_sandbox", map[string]any{}, &sb)
	var run runOut
	call(t, cs, "run_command", map[string]any{"sandbox_id": sb.SandboxID, "cmd": "python3 -c 'print(6*7)'"}, &run)
	if run.ExitCode == nil || *run.ExitCode != 0 || run.Stdout != "42\n" {
		t.Errorf("run python: %+v", run)
	}
	return sb.SandboxID
}

func sandboxExists(t *testing.T, c *client.Client, id string) bool {
	t.Helper()
	list, err := c.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == id {
			return true
		}
	}
	return false
}

func assertGone(t *testing.T, c *client.Client, id string) {
	t.Helper()
	if sandboxExists(t, c, id) {
		t.Errorf("sandbox %s outlived its stdio session", id)
	}
}

// logWriter sends a child's stderr to t.Log, a line at a time.
type logWriter struct {
	t   *testing.T
	buf strings.Builder
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	s := w.buf.String()
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		w.t.Log("agentbox mcp: " + s[:i])
		s = s[i+1:]
	}
	w.buf.Reset()
	w.buf.WriteString(s)
	return len(p), nil
}

var _ io.Writer = (*logWriter)(nil)
