//go:build vm

package hostd_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tmux runs a private tmux server (its own socket) for one test.
type tmux struct {
	t      *testing.T
	socket string
}

func newTmux(t *testing.T) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is not installed (ci/install-deps.sh installs it): %v", err)
	}
	tm := &tmux{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock")}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.socket, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.socket}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// waitScreen waits until the pane shows s and returns the screen.
func (tm *tmux) waitScreen(s string) string {
	tm.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		screen := tm.run("capture-pane", "-p", "-t", "cli")
		if strings.Contains(screen, s) {
			return screen
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("%q did not appear on the terminal:\n%s", s, screen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkCLITerminal runs `agentbox exec -it ID bash` in a real terminal
// (tmux): the remote shell sees the terminal's size, follows a resize, and
// exit ends the CLI with the shell's code.
func checkCLITerminal(t *testing.T, e *svcEnv) {
	bin := filepath.Join(t.TempDir(), "agentbox")
	build := exec.Command("go", "build", "-o", bin, "./cmd/agentbox")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agentbox: %v\n%s", err, out)
	}
	status := filepath.Join(t.TempDir(), "status")
	tm := newTmux(t)
	cli := fmt.Sprintf("AGENTBOX_URL=http://%s AGENTBOX_API_KEY=%s %s exec -it --env PS1='$ ' %s bash --norc -i; echo $? > %s",
		e.addr, testKey, bin, e.sb.ID, status)
	tm.run("new-session", "-d", "-s", "cli", "-x", "100", "-y", "30", "sh", "-c", cli+"; sleep 600")
	tm.run("set-option", "-t", "cli", "status", "off")
	tm.waitScreen("$") // the prompt (capture-pane trims its space)
	size := strings.TrimSpace(tm.run("display-message", "-p", "-t", "cli", "#{pane_height} #{pane_width}"))
	tm.run("send-keys", "-t", "cli", "stty size; echo one-$((6*7))", "Enter")
	if screen := tm.waitScreen("one-42"); !strings.Contains(screen, "\n"+size+"\n") {
		t.Errorf("stty size did not print the pane's size %q:\n%s", size, screen)
	}
	tm.run("resize-window", "-t", "cli", "-x", "120", "-y", "40")
	size = strings.TrimSpace(tm.run("display-message", "-p", "-t", "cli", "#{pane_height} #{pane_width}"))
	tm.run("send-keys", "-t", "cli", "clear; stty size; echo two-$((6*7))", "Enter")
	if screen := tm.waitScreen("two-42"); !strings.Contains(screen, size+"\n") {
		t.Errorf("after a resize, stty size did not print %q:\n%s", size, screen)
	}
	tm.run("send-keys", "-t", "cli", "exit 5", "Enter")
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(status)
		if err == nil && strings.TrimSpace(string(b)) != "" {
			if got := strings.TrimSpace(string(b)); got != "5" {
				t.Errorf("agentbox exited %s, want 5", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentbox did not exit:\n%s", tm.run("capture-pane", "-p", "-t", "cli"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
