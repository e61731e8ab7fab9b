//go:build vm

package sdktest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/gateway/gatewaytest"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/hostdtest"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// baseTemplate is the template every SDK test sandbox starts from.
const baseTemplate = "sdk-base"

func TestSDKs(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// The host's key is the token a fleet's control plane calls it with,
	// so the suites run on it directly and then through a gateway.
	h := hostdtest.Start(t, vmmtest.ShortTempDir(t), func(c *hostd.Config) { c.APIKey = gatewaytest.Token(fleetHost) })
	t.Cleanup(h.Stop)
	ctx := context.Background()
	start := time.Now()
	makeBaseTemplate(ctx, t, h.Client)
	t.Logf("cold boot, snapshot and template: %v", time.Since(start).Round(time.Millisecond))

	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "./cmd/agentbox")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build agentbox: %v\n%s", err, out)
	}
	cli := filepath.Join(bin, "agentbox")
	t.Run("hostd", func(t *testing.T) { suites(t, root, cli, h.URL, h.Key) })
	// Once more through the fleet's control plane, as a fleet of one host.
	t.Run("fleet", func(t *testing.T) { suites(t, root, cli, gatewaytest.Front(t, fleetHost, h.URL), gatewaytest.AdminKey) })
	if t.Failed() {
		b, _ := os.ReadFile(h.Log)
		t.Logf("hostd log (tail):\n%s", tail(b, 8000))
	}
}

// fleetHost is the host's name in the fleet of one that the suites run
// through the second time.
const fleetHost = "sdk-host"

// suites runs the Python and TypeScript suites against the API at url.
func suites(t *testing.T, root, cli, url, key string) {
	env := append(os.Environ(),
		"AGENTBOX_URL="+url,
		"AGENTBOX_API_KEY="+key,
		"AGENTBOX_TEMPLATE="+baseTemplate,
		"AGENTBOX_CLI="+cli,
		"AGENTBOX_DATA_DIR="+t.TempDir(), // no stray key file
	)
	t.Run("python", func(t *testing.T) {
		// Install the package as a user would, offline, and test that copy.
		site := t.TempDir()
		run(t, root, env, "/usr/bin/python3", "-m", "pip", "install", "--quiet", "--no-build-isolation",
			"--no-deps", "--no-index", "--target", site, "./sdk/python")
		pyEnv := append(env, "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
		code := run(t, root, pyEnv, "/usr/bin/python3", "-m", "pytest", "-p", "no:cacheprovider", "-v",
			"--rootdir", "sdk/python", "sdk/python/tests")
		if code == 5 {
			t.Error("pytest collected no tests")
		}
	})
	t.Run("typescript", func(t *testing.T) {
		dir := filepath.Join(root, "sdk", "typescript")
		run(t, dir, env, "npm", "ci", "--no-audit", "--no-fund")
		run(t, dir, env, "npm", "run", "build")
		run(t, dir, env, "node", "--test", "--test-concurrency=1", "dist/test/")
	})
}

// makeBaseTemplate cold-boots the suites' one sandbox and makes a template
// of it, so that every sandbox in them is a restore.
func makeBaseTemplate(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	snap, err := c.Snapshot(ctx, sb.ID, client.SnapshotRequest{})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if _, err := c.CreateTemplate(ctx, client.CreateTemplateRequest{Name: baseTemplate, SnapshotID: snap.ID}); err != nil {
		t.Fatalf("template: %v", err)
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
}

// run runs a command in dir, logs its output, fails t on a non-zero exit
// and returns the exit code.
func run(t *testing.T, dir string, env []string, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("$ %s %s (%v)\n%s", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String())
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		t.Errorf("%s: exit %d", name, ee.ExitCode())
		return ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	}
	return 0
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
