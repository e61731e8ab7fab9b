//go:build vm

package hostd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestTemplateKernel builds image templates with their own kernel: the
// default kernel and its modules passed explicitly boot and serve a
// sandbox; a file that is not a kernel is refused; a modules directory
// that guestinit cannot load fails the build with the console's last
// lines; no failed build leaves a template.
func TestTemplateKernel(t *testing.T) {
	ref, _ := serveImage(t, "busybox:1", busyboxImage(t))
	kernel := vmmtest.FindAssets(t).Kernel
	kdir := filepath.Dir(kernel)
	mine := t.TempDir()
	notKernel := filepath.Join(mine, "vmlinux.txt")
	junk := filepath.Join(mine, "junk-modules")
	for p, data := range map[string]string{notKernel: "this is not a kernel\n", filepath.Join(junk, "junk.ko"): "not a module\n",
		filepath.Join(junk, "modules.order"): "junk.ko\n"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, stop := startHostdOn(t, t.TempDir(), func(cfg *hostd.Config) {
		cfg.Images.ImportDirs = append(cfg.Images.ImportDirs, kdir, mine)
	})
	t.Cleanup(stop)
	ctx := context.Background()

	start := time.Now()
	tpl, err := c.BuildTemplateFromImage(ctx, "own-kernel", 0, client.ImageSource{Ref: ref, FreeMiB: 64,
		Kernel: kernel, Modules: filepath.Join(kdir, "modules")}, nil)
	if err != nil {
		t.Fatalf("build with the default kernel and modules given explicitly: %v", err)
	}
	t.Logf("template with its own kernel built in %v", time.Since(start).Round(time.Millisecond))
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tpl.Name})
	if err != nil {
		t.Fatal(err)
	}
	if res := mustExec(t, c, sb.ID, "echo", "hi"); res.Stdout != "hi\n" {
		t.Errorf("echo in a sandbox of the template: %+v", res)
	}
	// The kernel is shown, for the template and for one made of a
	// snapshot of its sandbox (which runs the same kernel).
	checkKernel := func(name string, k *client.TemplateKernel) {
		t.Helper()
		if k == nil || k.Source != client.TemplateKernelSourceTemplate || filepath.Base(k.Path) != filepath.Base(kernel) ||
			!strings.HasPrefix(k.Digest, "sha256:") || k.ModulesDir == "" || len(k.Modules) == 0 {
			t.Errorf("template %s kernel: %+v, want %s and its modules", name, k, kernel)
		}
	}
	checkKernel("own-kernel (built)", tpl.Kernel)
	sn, err := c.Snapshot(ctx, sb.ID, client.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTemplate(ctx, client.CreateTemplateRequest{Name: "derived", SnapshotID: sn.ID}); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, lt := range list {
		checkKernel(lt.Name, lt.Kernel)
	}
	if len(list) != 2 {
		t.Errorf("templates: %d, want own-kernel and derived", len(list))
	}
	if err := c.DeleteTemplate(ctx, "derived"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	var ae *client.APIError
	_, err = c.BuildTemplateFromImage(ctx, "not-kernel", 0, client.ImageSource{Ref: ref, FreeMiB: 64, Kernel: notKernel}, nil)
	if !errors.As(err, &ae) || ae.Code != "invalid_request" || !strings.Contains(ae.Message, "is not a kernel") {
		t.Errorf("a file that is not a kernel: %v, want invalid_request saying so", err)
	}

	start = time.Now()
	_, err = c.BuildTemplateFromImage(ctx, "bad-modules", 0, client.ImageSource{Ref: ref, FreeMiB: 64, Kernel: kernel, Modules: junk}, nil)
	t.Logf("a kernel that does not reach the agent failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), "console:") || !strings.Contains(err.Error(), "load modules") {
		t.Errorf("modules guestinit cannot load: %v, want the build failed with the console's last lines", err)
	}
	for _, n := range []string{"not-kernel", "bad-modules"} {
		if _, err := c.GetTemplate(ctx, n); err == nil {
			t.Errorf("failed build left template %s", n)
		}
	}
	if _, err := c.Health(ctx); err != nil {
		t.Errorf("hostd unhealthy: %v", err)
	}
}
