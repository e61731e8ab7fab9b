//go:build vm

package hostd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestSnapshotAPI drives templates, the warm pool, pause/resume and a hostd
// restart through the API.
func TestSnapshotAPI(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	c, stop := startHostdOn(t, data)
	defer stop()
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, sb.ID, "sh", "-c", "echo from-template > /root/marker")
	sn, err := c.Snapshot(ctx, sb.ID, client.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTemplate(ctx, client.CreateTemplateRequest{Name: "py", SnapshotID: sn.ID, PoolSize: 1}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, c, "py", 1)
	warm, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "py"})
	if err != nil {
		t.Fatal(err)
	}
	if r := mustExec(t, c, warm.ID, "cat", "/root/marker"); r.Stdout != "from-template\n" {
		t.Errorf("sandbox from the template: got %q", r.Stdout)
	}
	if r := mustExec(t, c, warm.ID, "hostname"); strings.TrimSpace(r.Stdout) != warm.ID {
		t.Errorf("warm sandbox hostname: got %q, want %s", r.Stdout, warm.ID)
	}
	checkPoolWeights(t, c, "py", sb.ID, warm.ID)
	wantAPIError(t, "delete a template's snapshot", c.DeleteSnapshot(ctx, sn.ID), 409)

	// Pause a sandbox with a background writer, restart hostd, resume.
	mustExec(t, c, warm.ID, "sh", "-c", "nohup sh -c 'while true; do date +%s%N >> /root/beat; sleep 0.2; done' >/dev/null 2>&1 &")
	if p, err := c.Pause(ctx, warm.ID); err != nil || p.State != "paused" {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	stop()
	c, stop = startHostdOn(t, data)
	defer stop()
	got, err := c.GetSandbox(ctx, warm.ID)
	if err != nil || got.State != "paused" {
		t.Fatalf("after a hostd restart: %+v, %v; want the paused sandbox listed", got, err)
	}
	if _, err := c.Resume(ctx, warm.ID); err != nil {
		t.Fatal(err)
	}
	r := mustExec(t, c, warm.ID, "sh", "-c", "a=$(wc -l < /root/beat); sleep 1; b=$(wc -l < /root/beat); [ $b -gt $a ] && echo beating; cat /root/marker")
	if r.Stdout != "beating\nfrom-template\n" {
		t.Errorf("after resume: got %q, want the writer still running and the files kept", r.Stdout)
	}
	for _, id := range []string{warm.ID} {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			t.Error(err)
		}
	}
}

func waitPool(t *testing.T, c *client.Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		tpl, err := c.GetTemplate(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if tpl.PoolReady >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("template %s: %d of %d warm sandboxes after 90 s", name, tpl.PoolReady, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkPoolWeights: a claimed warm sandbox's VMM runs at the default CPU
// weight, and the warm sandboxes a pool holds (name's refill, and the base
// pool's) at the least, so that work done ahead yields to sandboxes in use.
// running are the sandboxes in use.
func checkPoolWeights(t *testing.T, c *client.Client, name string, running ...string) {
	t.Helper()
	waitPool(t, c, name, 1)
	v1, v2 := "/sys/fs/cgroup/cpu/agentbox", "/sys/fs/cgroup/agentbox"
	weightFile, root, def, least := "cpu.shares", v1, "1024", "2"
	if _, err := os.Stat(v1); err != nil {
		weightFile, root, def, least = "cpu.weight", v2, "100", "1"
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "*", running[0]))
	if len(dirs) != 1 {
		t.Logf("no VMM cgroup of %s under %s: hostd runs without cgroups here", running[0], root)
		return
	}
	groups, _ := filepath.Glob(filepath.Join(filepath.Dir(dirs[0]), "sb-*"))
	pooled := 0
	for _, g := range groups {
		b, err := os.ReadFile(filepath.Join(g, weightFile))
		if err != nil {
			t.Fatal(err)
		}
		want := least
		for _, id := range running {
			if filepath.Base(g) == id {
				want = def
			}
		}
		if want == least {
			pooled++
		}
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("%s of %s: %s, want %s", weightFile, filepath.Base(g), got, want)
		}
	}
	if pooled == 0 {
		t.Errorf("no warm sandbox's cgroup among %v", groups)
	}
}
