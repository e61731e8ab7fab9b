//go:build vm

package commands

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/hostdtest"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestTemplateBuildReady runs `agentbox template build python-data` as a
// user does, in the checkout, against a real hostd that imports from the
// asset cache's templates: one command builds (here: finds cached) the
// layout with images/build-template.sh and the template from it in hostd,
// with progress on stderr and the name on stdout; a sandbox of it runs
// the recipe's pandas.
func TestTemplateBuildReady(t *testing.T) {
	cache := os.Getenv("AGENTBOX_CACHE")
	if cache == "" {
		cache = "/var/cache/agentbox"
	}
	tdir := filepath.Join(cache, "templates")
	h := hostdtest.Start(t, vmmtest.ShortTempDir(t), func(cfg *hostd.Config) {
		cfg.Images.ImportDirs = append(cfg.Images.ImportDirs, tdir)
	})
	t.Cleanup(h.Stop)
	ctx := context.Background()

	var out, errb bytes.Buffer
	code := Run(ctx, []string{"agentbox", "--url", h.URL, "--api-key", h.Key, "template", "build", "python-data"},
		IO{In: strings.NewReader(""), Out: &out, Err: &errb})
	t.Logf("stderr:\n%s", errb.String())
	if code != 0 || strings.TrimSpace(out.String()) != "python-data" {
		t.Fatalf("exit %d, stdout %q", code, out.String())
	}
	for _, want := range []string{"building the python-data layout", "images/build-template: ", "building template python-data from " + filepath.Join(tdir, "python-data")} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	tmpl, err := h.Client.GetTemplate(ctx, "python-data")
	if err != nil || tmpl.Image == nil {
		t.Fatalf("template: %+v, %v", tmpl, err)
	}
	sb, err := h.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "python-data"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Client.DeleteSandbox(context.Background(), sb.ID) })
	res, err := h.Client.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"python3", "-c", "import pandas; print('ok')"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "ok\n" {
		t.Errorf("pandas in the template: %+v, %v", res, err)
	}
}
