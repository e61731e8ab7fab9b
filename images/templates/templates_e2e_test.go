//go:build vm

// Package templates_test exercises the ready templates of this directory
// (images/templates/NAME, built by images/build-template.sh into
// $CACHE/templates/NAME) in a real hostd: a test makes a hostd template of
// a layout, which boots it once and snapshots it, and starts its sandboxes
// from that. A test binary of its own, so that its slow guests (pandas,
// Chromium under TCG) do not eat into hostd's package timeout.
package templates_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/hostdtest"
	"github.com/agentbox/agentbox/internal/nettest"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

func readyTemplatesDir() string { return filepath.Join(vmmtest.CacheDir(), "templates") }

// importReadyTemplates lets hostd build templates from the ready layouts.
func importReadyTemplates(cfg *hostd.Config) {
	cfg.Images.ImportDirs = append(cfg.Images.ImportDirs, readyTemplatesDir())
}

// startHostd runs a hostd that imports the ready layouts, with the
// upstream's names and CA for its egress proxy when up is set.
func startHostd(t *testing.T, up *nettest.Upstream) *client.Client {
	t.Helper()
	data := vmmtest.ShortTempDir(t)
	var caFile string
	if up != nil {
		caFile = filepath.Join(data, "upstream-ca.pem")
		if err := os.WriteFile(caFile, up.CA.PEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := hostdtest.Start(t, data, importReadyTemplates, func(cfg *hostd.Config) {
		if up != nil {
			cfg.EgressHosts, cfg.EgressUpstreamCA = up.Hosts(), caFile
		}
	})
	t.Cleanup(h.Stop)
	return h.Client
}

// buildReadyTemplate makes template name of the ready layout of the same
// name, with memMiB for its sandboxes (the snapshot fixes it).
func buildReadyTemplate(t *testing.T, c *client.Client, name string, memMiB int) client.Template {
	t.Helper()
	dir := filepath.Join(readyTemplatesDir(), name)
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		t.Fatalf("ready template %s is not built (run `make templates`): %v", name, err)
	}
	start := time.Now()
	tpl, err := c.BuildTemplateFromImage(context.Background(), name, 0,
		client.ImageSource{Ref: dir, MemoryMiB: memMiB, FreeMiB: 512}, nil)
	if err != nil {
		t.Fatalf("build template %s: %v", name, err)
	}
	t.Logf("template %s made of its layout in %v", name, time.Since(start).Round(time.Millisecond))
	return tpl
}

// createFrom starts a sandbox of template and deletes it when the test ends.
func createFrom(t *testing.T, c *client.Client, req client.CreateSandboxRequest) client.Sandbox {
	t.Helper()
	start := time.Now()
	sb, err := c.CreateSandbox(context.Background(), req)
	if err != nil {
		t.Fatalf("create from %s: %v", req.Template, err)
	}
	t.Logf("sandbox of %s started in %v", req.Template, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.DeleteSandbox(context.Background(), sb.ID); err != nil {
			t.Errorf("delete sandbox: %v", err)
		}
	})
	return sb
}

// execSlow runs argv in the sandbox with room for big programs under TCG on a loaded
// machine (Chromium, importing pandas): 15 minutes.
func execSlow(t *testing.T, c *client.Client, id string, argv ...string) client.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: argv})
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	t.Logf("%s ran in %v", argv[0], time.Since(start).Round(time.Millisecond))
	return r
}

// readPNG reads path from the sandbox through the files API and decodes it.
func readPNG(t *testing.T, c *client.Client, id, path string) (w, h int) {
	t.Helper()
	var buf bytes.Buffer
	if err := c.ReadFile(context.Background(), id, path, &buf); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("%s (%d bytes) is not a PNG: %v", path, buf.Len(), err)
	}
	if a := filepath.Join(t.ArtifactDir(), filepath.Base(path)); os.WriteFile(a, buf.Bytes(), 0o644) == nil {
		t.Logf("%s kept as %s", path, a)
	}
	b := img.Bounds()
	return b.Dx(), b.Dy()
}

const salesCSV = `region,product,units,price
north,apples,10,1.5
south,apples,4,1.5
north,pears,3,2.0
east,pears,7,2.0
south,plums,5,3.0
east,apples,1,1.5
`

// chartPy aggregates the CSV with pandas (revenue per region), prints the
// totals and draws them as a bar chart with matplotlib.
const chartPy = `import pandas as pd, numpy as np, matplotlib.pyplot as plt
df = pd.read_csv("/root/sales.csv")
df["revenue"] = df["units"] * df["price"]
by = df.groupby("region")["revenue"].sum().sort_index()
print(" ".join(f"{r}={v:.2f}" for r, v in by.items()), f"mean={np.mean(by.values):.2f}")
fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
by.plot.bar(ax=ax, title="revenue by region")
fig.savefig("/root/chart.png")
`

// chromiumFlags keep headless Chromium to the one page it is given.
var chromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-quic", "--no-default-browser-check", "--disable-extensions",
}

// TestReadyTemplatePythonData: pandas aggregates a CSV written through the
// files API and matplotlib's chart is read back as a PNG.
func TestReadyTemplatePythonData(t *testing.T) {
	c := startHostd(t, nil)
	ctx := context.Background()
	buildReadyTemplate(t, c, "python-data", 1024)
	sb := createFrom(t, c, client.CreateSandboxRequest{Template: "python-data"})
	for path, body := range map[string]string{"/root/sales.csv": salesCSV, "/root/chart.py": chartPy} {
		if err := c.WriteFile(ctx, sb.ID, path, 0o644, strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}
	r := execSlow(t, c, sb.ID, "python3", "/root/chart.py")
	// east 7*2+1*1.5, north 10*1.5+3*2, south 4*1.5+5*3
	if want := "east=15.50 north=21.00 south=21.00 mean=19.17\n"; r.ExitCode != 0 || r.Stdout != want {
		t.Fatalf("chart.py: exit %d, stdout %q (want %q), stderr:\n%s", r.ExitCode, r.Stdout, want, r.Stderr)
	}
	if w, h := readPNG(t, c, sb.ID, "/root/chart.png"); w != 640 || h != 480 {
		t.Errorf("chart is %dx%d, want 640x480", w, h)
	}
}

// TestReadyTemplateBrowser: headless Chromium in the sandbox opens a page
// of a test upstream through the egress proxy (the upstream allowlisted),
// dumps its DOM and screenshots it; the screenshot comes back through the
// files API.
func TestReadyTemplateBrowser(t *testing.T) {
	up := nettest.NewWithoutSinks(t) // it probes nothing that must be blocked
	marker := fmt.Sprintf("agentbox-page-%d", time.Now().UnixNano())
	up.Route("allowed.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><head><title>ready</title></head>
<body style="background:#fff"><h1 id="m">%s</h1><script>document.body.dataset.js = "ran"</script></body></html>`, marker)
	}))
	c := startHostd(t, up)
	buildReadyTemplate(t, c, "browser", 2048)
	sb := createFrom(t, c, client.CreateSandboxRequest{Template: "browser",
		Network: &client.NetworkPolicyInput{AllowDomains: []string{"allowed.test"}}})

	// One run dumps the DOM and takes the screenshot (Chromium's start is
	// most of the time under TCG).
	argv := append([]string{"timeout", "840", "chromium"}, chromiumFlags...)
	argv = append(argv, "--user-data-dir=/tmp/chromium-profile", "--window-size=800,600",
		"--dump-dom", "--screenshot=/root/page.png", "http://allowed.test/page")
	r := execSlow(t, c, sb.ID, argv...)
	if r.ExitCode != 0 {
		t.Fatalf("chromium: exit %d\nstderr:\n%s", r.ExitCode, r.Stderr)
	}
	if !strings.Contains(r.Stdout, marker) || !strings.Contains(r.Stdout, `data-js="ran"`) {
		t.Errorf("DOM has no marker %s or script result:\n%s", marker, r.Stdout)
	}
	if w, h := readPNG(t, c, sb.ID, "/root/page.png"); w != 800 || h != 600 {
		t.Errorf("screenshot is %dx%d, want 800x600", w, h)
	}
	if !slices.ContainsFunc(up.Requests(), func(req nettest.Request) bool { return req.Host == "allowed.test" && req.Path == "/page" }) {
		t.Errorf("the upstream saw no request for the page: %+v", up.Requests())
	}
}
