//go:build vm

package hostd_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestCompare is issue 41's workflow on one hostd and one booted sandbox:
// a Python project forked 5 ways with a different edit in each; the diff
// of each fork names exactly its edited file with the right patch; the
// lineage shows the 5 forks with their exit codes; the events diff shows
// the differing commands; then the edge cases (binary, symlink, mode, a
// deleted tree, a rename, a file over the patch cap, a non-UTF-8 name),
// and a paused fork compared without being resumed.
func TestCompare(t *testing.T) {
	c, _ := startHostd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 512, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sb.ID) })
	setup := "mkdir -p /root/proj/tree/sub && cd /root/proj && for i in 0 1 2 3 4; do printf 'def f%d():\\n    return %d\\n' $i $i > mod$i.py; done && " +
		"printf 'import mod0, mod1, mod2, mod3, mod4\\nassert mod0.f0() == 0\\n' > test_all.py && echo keep > tree/sub/a && echo b > tree/b && " +
		"echo r > renamed-me && echo m > mode-me && python3 test_all.py"
	if r := mustExec(t, c, sb.ID, "sh", "-c", setup); r.ExitCode != 0 {
		t.Fatalf("setup: %+v", r)
	}
	forks, err := c.Fork(ctx, sb.ID, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), f.ID) })
	}
	for i, f := range forks {
		edit := fmt.Sprintf("cd /root/proj && sed -i 's/return %d/return %d/' mod%d.py && python3 test_all.py", i, 10+i, i)
		mustExec(t, c, f.ID, "sh", "-c", edit) // mod0's edit fails the test: exit 1
	}
	for i, f := range forks {
		d, err := c.Diff(ctx, f.ID, sb.ID, client.DiffOptions{Path: "/root", Patch: true, Events: true})
		if err != nil {
			t.Fatalf("diff %d: %v", i, err)
		}
		want := fmt.Sprintf("/root/proj/mod%d.py", i)
		if len(d.Entries) != 1 || d.Entries[0].Path != want || d.Entries[0].Status != client.DiffEntryStatusModified {
			t.Fatalf("diff of fork %d: got %+v, want only %s modified", i, d.Entries, want)
		}
		p := d.Entries[0].Patch
		if !strings.Contains(p, fmt.Sprintf("-    return %d\n", i)) || !strings.Contains(p, fmt.Sprintf("+    return %d\n", 10+i)) {
			t.Errorf("patch of fork %d:\n%s", i, p)
		}
		if d.Method != client.DiffMethodJournal || d.BaseSnapshot == "" {
			t.Errorf("fork %d: method %s base %q, want journal on the fork's snapshot", i, d.Method, d.BaseSnapshot)
		}
		if d.Events == nil || !hasExec(d.Events.New, fmt.Sprintf("mod%d.py", i)) {
			t.Errorf("fork %d: the events diff lacks its command: %+v", i, d.Events)
		}
	}
	checkLineage(t, c, forks)
	checkEdgeCases(t, c, forks[1].ID, sb.ID)
	checkPausedDiff(t, c, forks[2].ID, sb.ID)
}

func hasExec(evs []client.AuditEvent, word string) bool {
	return slices.ContainsFunc(evs, func(e client.AuditEvent) bool {
		return e.Exec != nil && e.Exec.Argv != nil && strings.Contains(strings.Join(*e.Exec.Argv, " "), word)
	})
}

func checkLineage(t *testing.T, c *client.Client, forks []client.Sandbox) {
	l, err := c.Lineage(context.Background(), forks[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	for _, n := range l.Root.Children {
		if n.LastCommand != nil && n.LastCommand.ExitCode != nil {
			codes[n.ID] = *n.LastCommand.ExitCode
		}
	}
	for i, f := range forks {
		want := 0
		if i == 0 {
			want = 1 // mod0's edit breaks test_all.py's assert
		}
		if got, ok := codes[f.ID]; !ok || got != want {
			t.Errorf("lineage: fork %d %s: exit %d (listed %v), want %d; root %+v", i, f.ID, got, ok, want, l.Root)
		}
	}
}

// checkEdgeCases makes every kind of change in fork and compares it by
// the walk (which sees a chmod alone) and by the journal.
func checkEdgeCases(t *testing.T, c *client.Client, fork, parent string) {
	script := "cd /root/proj && head -c 3000 /dev/urandom > bin.dat && ln -s mod1.py link && chmod 0750 mode-me && rm -r tree && " +
		"mv renamed-me renamed && head -c 400000 /dev/zero | tr '\\0' x > big.txt && touch \"$(printf 'caf\\351')\""
	if r := mustExec(t, c, fork, "sh", "-c", script); r.ExitCode != 0 {
		t.Fatalf("edits: %+v", r)
	}
	for _, method := range []string{"walk", "journal"} {
		d, err := c.Diff(context.Background(), fork, parent, client.DiffOptions{Path: "/root/proj", Patch: true, Method: method})
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		by := map[string]client.DiffEntry{}
		for _, e := range d.Entries {
			by[e.Path] = e
		}
		check := func(path string, ok func(client.DiffEntry) bool) {
			if e, found := by[path]; !found || !ok(e) {
				t.Errorf("%s: %s: got %+v (found %v)", method, path, e, found)
			}
		}
		check("/root/proj/bin.dat", func(e client.DiffEntry) bool { return e.Status == "added" && e.Binary })
		check("/root/proj/link", func(e client.DiffEntry) bool { return e.Kind == "symlink" && e.New.LinkTarget == "mod1.py" })
		check("/root/proj/renamed", func(e client.DiffEntry) bool { return e.Status == "renamed" && e.OldPath == "/root/proj/renamed-me" })
		check("/root/proj/big.txt", func(e client.DiffEntry) bool { return e.PatchOmitted == "too_large" })
		check("/root/proj/tree/sub/a", func(e client.DiffEntry) bool { return e.Status == "removed" })
		if method == "walk" { // the journal's JSON keeps no invalid UTF-8, nor an event for a chmod
			check("/root/proj/caf\uFFFD", func(e client.DiffEntry) bool { return string(e.PathB64) == "/root/proj/caf\xe9" })
			check("/root/proj/mode-me", func(e client.DiffEntry) bool { return slices.Contains(e.Changes, "mode") && e.New.Mode == 0o750 })
		}
	}
}

// checkPausedDiff pauses fork, compares it, and finds it still paused.
func checkPausedDiff(t *testing.T, c *client.Client, fork, parent string) {
	ctx := context.Background()
	if _, err := c.Pause(ctx, fork); err != nil {
		t.Fatal(err)
	}
	d, err := c.Diff(ctx, fork, parent, client.DiffOptions{Path: "/root"})
	if err != nil {
		t.Fatal(err)
	}
	if d.New.Source != "journal" || len(d.Entries) != 1 || d.Entries[0].Path != "/root/proj/mod2.py" {
		t.Errorf("paused diff: got %+v", d)
	}
	sb, err := c.GetSandbox(ctx, fork)
	if err != nil || sb.State != client.SandboxStatePaused {
		t.Errorf("after the diff: state %s (%v), want paused", sb.State, err)
	}
}
