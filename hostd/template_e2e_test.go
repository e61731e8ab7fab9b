//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/blueprint"
)

// TestTemplateBuild builds a template from a blueprint in a real sandbox,
// starts a sandbox from it, and rebuilds with a changed last step.
func TestTemplateBuild(t *testing.T) {
	c, _ := startHostd(t)
	ctx := context.Background()
	yaml := func(last string) []byte {
		return []byte(`base: debian-bookworm
memory_mib: 256
steps:
  - run: echo built > /root/built
  - env: {GREETING: hello}
  - workdir: /opt/app
  - run: ` + last + `
`)
	}
	bp, err := blueprint.Parse(yaml("echo one > /opt/app/last"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := blueprint.Build(ctx, c, "app", bp, blueprint.BuildOptions{Out: &out, Err: &out}); err != nil {
		t.Fatalf("build: %v\n%s", err, out.String())
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "app"})
	if err != nil {
		t.Fatal(err)
	}
	r := mustExec(t, c, sb.ID, "sh", "-c", "cat /root/built last; echo $GREETING; pwd")
	if r.Stdout != "built\none\nhello\n/opt/app\n" {
		t.Errorf("sandbox from the template: got %q, want its files, env and workdir", r.Stdout)
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	bp, _ = blueprint.Parse(yaml("echo two > /opt/app/last"))
	out.Reset()
	if _, err := blueprint.Build(ctx, c, "app", bp, blueprint.BuildOptions{Out: &out, Err: &out}); err != nil {
		t.Fatalf("rebuild: %v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), "CACHED"); n != 3 {
		t.Errorf("rebuild after changing step 4: %d cached steps, want 3:\n%s", n, out.String())
	}
	sb, err = c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if r := mustExec(t, c, sb.ID, "cat", "/opt/app/last"); r.Stdout != "two\n" {
		t.Errorf("after the rebuild: got %q", r.Stdout)
	}
}
