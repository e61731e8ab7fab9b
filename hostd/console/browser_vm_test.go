//go:build vm

package console_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/hostdtest"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// consoleDir is console/ (the front end's source and its node_modules),
// from this package's directory.
const consoleDir = "../../console"

// browserDeps returns node and chromium, skipping loudly when the browser
// toolchain is not installed (ci/install-deps.sh installs chromium and
// nodejs; `make console-deps` runs npm ci in console/).
func browserDeps(t *testing.T) (node, chromium string) {
	t.Helper()
	chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("SKIP (browser test not run): %s is missing; ci/install-deps.sh installs chromium", chromium)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIP (browser test not run): node is missing; ci/install-deps.sh installs nodejs")
	}
	if _, err := os.Stat(filepath.Join(consoleDir, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Skip("SKIP (browser test not run): console/node_modules is missing; run `make console-deps` (npm ci in console/)")
	}
	return node, chromium
}

// runBrowser runs console/test/browser.mjs against url, keeping its
// screenshots in t.ArtifactDir() (and copying them to console/screenshots/).
func runBrowser(t *testing.T, node, chromium, url, key, scenario string) {
	t.Helper()
	out := t.ArtifactDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "test/browser.mjs")
	cmd.Dir = consoleDir
	cmd.Env = append(os.Environ(), "CONSOLE_URL="+url, "CONSOLE_KEY="+key, "ARTIFACTS="+out, "SCENARIO="+scenario, "CHROMIUM="+chromium)
	// Node, chromium and its helpers are one process group, killed when
	// the run ends however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	t.Logf("browser (%s):\n%s", scenario, buf.String())
	if err != nil {
		t.Fatalf("browser scenario %s: %v (screenshots in %s)", scenario, err, out)
	}
	copyScreenshots(t, out)
	t.Logf("screenshots: %s", out)
}

// copyScreenshots keeps the run's screenshots beside the console's README
// when AGENTBOX_CONSOLE_SCREENSHOTS=1 (make console-screenshots).
func copyScreenshots(t *testing.T, dir string) {
	if os.Getenv("AGENTBOX_CONSOLE_SCREENSHOTS") != "1" {
		return
	}
	shots, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	dst := filepath.Join(consoleDir, "screenshots")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range shots {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(s)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConsoleInBrowser drives the console in headless chromium against a
// real hostd with real VMs: log-in (a missing and a wrong key refused),
// create, terminal, files (hostile names, drag and drop, watch), timeline,
// sessions, usage, network, a service URL, forks on the tree, delete.
func TestConsoleInBrowser(t *testing.T) {
	node, chromium := browserDeps(t)
	h := hostdtest.Start(t, t.TempDir())
	defer h.Stop()
	runBrowser(t, node, chromium, h.URL, h.Key, "vm")
}

// TestConsoleThousandSandboxes renders and scrolls a 1,000-sandbox list on
// a hostd over vmmtest's in-process driver; the script prints the time to
// first paint and to interactive.
func TestConsoleThousandSandboxes(t *testing.T) {
	node, chromium := browserDeps(t)
	h := hostdtest.Start(t, t.TempDir(), func(cfg *hostd.Config) {
		cfg.Driver = vmmtest.NewFakeDriver(vmmtest.FakeOptions{})
		cfg.NoCgroups = true
		cfg.Network = "off"
		cfg.MemoryOvercommit, cfg.VCPUOvercommit = 1e6, 1e6
	})
	defer h.Stop()
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	sem := make(chan struct{}, 8)
	for i := range 1000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := h.Client.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 128, Metadata: map[string]string{"name": fmt.Sprintf("sb-list-%04d", i)}})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	t.Logf("1000 sandboxes created over the in-process driver in %v", time.Since(start).Round(time.Millisecond))
	runBrowser(t, node, chromium, h.URL, h.Key, "list1000")
}
