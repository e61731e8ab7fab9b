package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// helpFlags returns the flag names (without dashes) that a --help lists,
// --help itself left out.
func helpFlags(help string) []string {
	var names []string
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "--") {
			continue
		}
		if name := strings.TrimSuffix(strings.TrimPrefix(f[0], "--"), ","); name != "help" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// TestHelpListsServeFlags: hostd and `agentbox serve` take the same flags,
// serve's --api-key being agentbox's global one; the CLI's other globals
// (--url, --json) are for its client commands.
func TestHelpListsServeFlags(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"hostd", "--help"}, &out, io.Discard); err != nil {
		t.Fatalf("hostd --help: %v", err)
	}
	hostdFlags := helpFlags(out.String())
	if len(hostdFlags) < 30 {
		t.Fatalf("hostd --help lists %d flags, want 30 or more:\n%s", len(hostdFlags), out.String())
	}

	bin := filepath.Join(t.TempDir(), "agentbox")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/agentbox/agentbox/cmd/agentbox").CombinedOutput(); err != nil {
		t.Fatalf("go build agentbox: %v\n%s", err, b)
	}
	help, err := exec.Command(bin, "serve", "--help").Output()
	if err != nil {
		t.Fatalf("agentbox serve --help: %v", err)
	}
	serveFlags := slices.DeleteFunc(helpFlags(string(help)), func(n string) bool { return n == "url" || n == "json" })
	if !slices.Equal(hostdFlags, serveFlags) {
		t.Errorf("hostd --help lists %q,\nagentbox serve --help %q", hostdFlags, serveFlags)
	}
}
