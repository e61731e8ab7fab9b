//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chromiumFlags keep headless Chromium off the network: it loads only the
// loopback URL it is given.
var chromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-quic", "--no-default-browser-check", "--disable-extensions",
}

// checkChromium opens the host-based service URL with the access token in
// headless Chromium: ?token= becomes a cookie, and the page is the guest's
// directory listing. A screenshot is kept as a test artifact.
func checkChromium(t *testing.T, e *svcEnv) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (ci/install-deps.sh installs it): %v", err)
	}
	u := e.hostURL(8000, "/?token="+e.tok)
	if !strings.HasPrefix(u, "http://8000-") || !strings.Contains(u, ".localhost:") {
		t.Fatalf("refusing to open a non-loopback URL in chromium: %s", u)
	}
	dom := runChromium(t, bin, "--dump-dom", u)
	if !strings.Contains(dom, "Directory listing for /") || !strings.Contains(dom, "hello.txt") {
		t.Errorf("chromium's DOM is not the directory listing:\n%s", dom)
	}
	shot := filepath.Join(t.ArtifactDir(), "service-url.png")
	runChromium(t, bin, "--window-size=1024,640", "--screenshot="+shot, u)
	b, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %v (%d bytes)", shot, err, len(b))
	}
	t.Logf("screenshot of the service URL: %s", shot)
}

// runChromium runs one headless Chromium with a fresh profile and returns
// its stdout. Chromium and the helpers it forks run in their own process
// group, which is killed when the run ends, however it ends.
func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	profile := t.TempDir()
	args = append(append(append([]string{}, chromiumFlags...), "--user-data-dir="+profile), args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = profile
	cmd.Env = append(os.Environ(), "HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	pgid := cmd.Process.Pid
	// Helpers (zygote, renderer) may outlive the browser; end the group.
	defer func() {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("kill chromium's process group %d: %v", pgid, err)
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("chromium %v: %v\nstderr:\n%s", args, err, stderr.String())
	}
	return stdout.String()
}
