//go:build vm

package hostd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/gittest"
	"github.com/agentbox/agentbox/internal/nettest"
)

// A git mount end to end: a git server (git http-backend behind net/http/cgi,
// requiring a token) in the test's upstream namespace as git.test; hostd
// clones it with the token; the guest has the working tree, an origin
// without credentials, commits and pushes through the egress proxy, which
// injects the token (the rule hostd added for the mount's host); the
// upstream has the commit, and the token is nowhere in the guest; a fork
// works on its own copy of the tree. A URL that fails to clone is a 400 and
// leaves nothing.
func TestGitMount(t *testing.T) {
	up := nettest.New(t)
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	token := "ghs_" + hex.EncodeToString(b)
	gs := &gittest.Server{Root: t.TempDir(), Token: token}
	bare := gs.NewRepo(t, "repo", map[string]string{"README.md": "hello from git\n"})
	up.Route("git.test", gs.Handler(t))
	c, data := startNetHostd(t, up)
	ctx := context.Background()
	// Named gh, with a placeholder in the env, for checkSecretAbsent.
	if _, err := c.CreateSecret(ctx, "gh", token); err != nil {
		t.Fatal(err)
	}
	mount := client.Mount{Type: client.MountTypeGit, URL: "https://git.test/repo.git", Ref: "main", Secret: "gh", Path: "/src"}

	bad := mount
	bad.URL = "https://git.test/nope.git"
	_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 512, Mounts: []client.Mount{bad}})
	wantAPIError(t, "a repository that fails to clone", err, 400)
	if list, _ := c.ListSandboxes(ctx); len(list) != 0 {
		t.Errorf("the failed create left %d sandboxes", len(list))
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "mounts-stage")); len(ents) != 0 {
		t.Errorf("the failed create left %d staged clones", len(ents))
	}

	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 512, Mounts: []client.Mount{mount},
		SecretEnv: map[string]string{"GH_TOKEN": "gh"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	r := mustExec(t, c, sb.ID, "sh", "-c", "cat /src/README.md && git -C /src remote get-url origin && git -C /src config --list")
	if !strings.HasPrefix(r.Stdout, "hello from git\nhttps://git.test/repo.git\n") || strings.Contains(r.Stdout, token) {
		t.Fatalf("the guest's clone: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	r = mustExec(t, c, sb.ID, "sh", "-c", `cd /src && echo change > guest.txt && git add guest.txt &&
git -c user.name=agent -c user.email=agent@example.invalid commit -q -m "from the guest" && git push -q origin HEAD:main 2>&1; echo rc=$?`)
	if !strings.Contains(r.Stdout, "rc=0") {
		t.Fatalf("commit and push in the guest: %q %q", r.Stdout, r.Stderr)
	}
	if got := gittest.Run(t, bare, "log", "-1", "--format=%s", "main"); got != "from the guest" {
		t.Errorf("the upstream's main is at %q", got)
	}
	r = mustExec(t, c, sb.ID, "sh", "-c", "cd /src && git fetch -q origin 2>&1; echo rc=$?")
	if !strings.Contains(r.Stdout, "rc=0") {
		t.Errorf("fetch in the guest: %q", r.Stdout)
	}
	checkSecretAbsent(t, c, sb.ID, data, token)

	// A fork gets its own copy of the working tree: its changes stay in it.
	forks, err := c.Fork(ctx, sb.ID, 1)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	defer c.DeleteSandbox(ctx, forks[0].ID)
	r = mustExec(t, c, forks[0].ID, "sh", "-c", "cd /src && git log -1 --format=%s && echo forked > fork.txt && ls")
	if !strings.HasPrefix(r.Stdout, "from the guest\n") || !strings.Contains(r.Stdout, "fork.txt") {
		t.Errorf("the fork's tree: %q %q", r.Stdout, r.Stderr)
	}
	if r := mustExec(t, c, sb.ID, "sh", "-c", "test -e /src/fork.txt; echo $?"); r.Stdout != "1\n" {
		t.Errorf("the fork's file reached its parent's tree: %q", r.Stdout)
	}
}
