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
	assets := makeSuiteAssets(t)
	h := hostdtest.Start(t, vmmtest.ShortTempDir(t), assets.tweak, func(c *hostd.Config) { c.APIKey = gatewaytest.Token(fleetHost) })
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
	t.Run("hostd", func(t *testing.T) { suites(t, root, cli, h.URL, h.Key, assets.env()) })
	// Once more through the fleet's control plane, as a fleet of one host.
	t.Run("fleet", func(t *testing.T) {
		suites(t, root, cli, gatewaytest.Front(t, fleetHost, h.URL), gatewaytest.AdminKey, assets.env())
	})
	if t.Failed() {
		b, _ := os.ReadFile(h.Log)
		t.Logf("hostd log (tail):\n%s", tail(b, 8000))
	}
}

// fleetHost is the host's name in the fleet of one that the suites run
// through the second time.
const fleetHost = "sdk-host"

// suites runs the Python and TypeScript suites against the API at url.
func suites(t *testing.T, root, cli, url, key string, extra []string) {
	env := append(os.Environ(),
		"AGENTBOX_URL="+url,
		"AGENTBOX_API_KEY="+key,
		"AGENTBOX_TEMPLATE="+baseTemplate,
		"AGENTBOX_CLI="+cli,
		"AGENTBOX_DATA_DIR="+t.TempDir(), // no stray key file
	)
	env = append(env, extra...)
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
		node, npm, nodeEnv := nodeTools(t, env)
		run(t, dir, nodeEnv, node, "--version")
		run(t, dir, nodeEnv, npm, "ci", "--no-audit", "--no-fund")
		run(t, dir, nodeEnv, npm, "run", "build")
		run(t, dir, nodeEnv, node, "--test", "--test-concurrency=1", "dist/test/")
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

// nodeTools is the Node and npm the TypeScript suite runs with: the ones
// ci/install-deps.sh installs (Debian's /usr/bin/node, Node 18 on Debian
// 12), or $AGENTBOX_NODE (a node binary; the npm beside it if there is
// one), first in the suite's PATH so that npm's scripts run it too.
func nodeTools(t *testing.T, env []string) (node, npm string, nodeEnv []string) {
	t.Helper()
	node, npm = "/usr/bin/node", "/usr/bin/npm"
	if v := os.Getenv("AGENTBOX_NODE"); v != "" {
		node = v
		if p := filepath.Join(filepath.Dir(v), "npm"); fileExists(p) {
			npm = p
		}
	}
	for _, f := range []string{node, npm} {
		if !fileExists(f) {
			t.Fatalf("%s is missing: run ci/install-deps.sh (it installs Debian's nodejs and npm)", f)
		}
	}
	nodeEnv = append([]string{}, env...)
	for i, kv := range nodeEnv {
		if strings.HasPrefix(kv, "PATH=") {
			nodeEnv[i] = "PATH=" + filepath.Dir(node) + ":" + strings.TrimPrefix(kv, "PATH=")
		}
	}
	return node, npm, nodeEnv
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
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
