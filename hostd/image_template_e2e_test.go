//go:build vm

package hostd_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentbox/agentbox/client"
)

// serveImage pushes img as repoTag to a registry on loopback (closed
// when the test ends) and returns its reference and the registry's host.
func serveImage(t *testing.T, repoTag string, img v1.Image) (ref, host string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref = u.Host + "/" + repoTag
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return ref, u.Host
}

// busyboxImage is an image of Debian's static busybox alone: no libc, no
// shell but busybox's, no /etc. Its USER is numeric (no /etc/passwd names
// it) and its Entrypoint and Cmd, its main service, write a file and wait.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is needed (ci/install-deps.sh installs it): %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	hdrs := []*tar.Header{{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "work/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}}
	for _, app := range []string{"sh", "echo", "cat", "ls", "pwd", "id", "sleep"} {
		hdrs = append(hdrs, &tar.Header{Name: "bin/" + app, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	}
	for _, h := range hdrs {
		h.ModTime = mtime
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Name == "bin/busybox" {
			tw.Write(bb)
		}
	}
	tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Env: []string{"PATH=/bin", "GREETING=from-image"}, WorkingDir: "/work", User: "1000",
		Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{`echo "main $(id -u) $(pwd) $GREETING" > /tmp/main.txt; echo started; exec sleep 3600`},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}}}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageTemplate builds a template from a busybox-only image served by
// a registry on loopback, starts a sandbox from it, and runs commands and
// file calls there; bad references fail cleanly first.
func TestImageTemplate(t *testing.T) {
	ref, host := serveImage(t, "busybox:1", busyboxImage(t))
	c, data := startHostd(t)
	ctx := context.Background()

	// Bad input: a clear error, no template, no cached base, hostd healthy.
	_, err := c.BuildTemplateFromImage(ctx, "nope", 0, client.ImageSource{Ref: host + "/missing:1"}, nil)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != "registry_error" || !strings.Contains(ae.Message, "missing") {
		t.Errorf("unknown reference: %v, want a registry_error naming it", err)
	}
	if _, err := c.BuildTemplateFromImage(ctx, "nope", 0, client.ImageSource{Ref: "/etc/passwd"}, nil); !errors.As(err, &ae) || ae.Code != "invalid_request" {
		t.Errorf("a local path outside the import dirs: %v, want invalid_request", err)
	}
	if _, err := c.GetTemplate(ctx, "nope"); err == nil {
		t.Error("a failed build left a template")
	}

	start := time.Now()
	var phases []string
	tpl, err := c.BuildTemplateFromImage(ctx, "bb", 0, client.ImageSource{Ref: ref, FreeMiB: 64}, func(ev client.BuildEvent) {
		if ev.Phase != nil && (len(phases) == 0 || phases[len(phases)-1] != *ev.Phase) {
			phases = append(phases, *ev.Phase)
		}
	})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Logf("template from image built in %v (phases %v)", time.Since(start).Round(time.Millisecond), phases)
	if tpl.Image == nil || !strings.HasPrefix(tpl.Image.Digest, "sha256:") || tpl.Image.ExposedPorts == nil || (*tpl.Image.ExposedPorts)[0] != "8080/tcp" ||
		tpl.Image.User == nil || *tpl.Image.User != "1000" || tpl.Image.Cmd == nil {
		t.Errorf("template image: %+v", tpl.Image)
	}
	if tpl.Kernel == nil || tpl.Kernel.Source != client.TemplateKernelSourceDefault {
		t.Errorf("template kernel: %+v, want default", tpl.Kernel)
	}
	if got, _ := filepath.Glob(filepath.Join(data, "images", "*.qcow2")); len(got) != 1 {
		t.Errorf("cached bases: %v, want one", got)
	}

	start = time.Now()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "bb"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sandbox from the image template started in %v", time.Since(start).Round(time.Millisecond))
	if r := mustExec(t, c, sb.ID, "echo", "hi"); r.Stdout != "hi\n" || r.ExitCode != 0 {
		t.Errorf("echo: %+v", r)
	}
	if r := mustExec(t, c, sb.ID, "sh", "-c", "echo $GREETING; pwd; id -u; id -g; echo $HOME"); r.Stdout != "from-image\n/work\n1000\n0\n/\n" {
		t.Errorf("the image's env, working dir and numeric USER: %q", r.Stdout)
	}
	if r := execAs(t, c, sb.ID, "root", "sh", "-c", "id -u; echo $HOME"); r.Stdout != "0\n/root\n" {
		t.Errorf("user root overriding the image's USER: %q", r.Stdout)
	}
	if r := execAs(t, c, sb.ID, "2000:3000", "id"); !strings.HasPrefix(r.Stdout, "uid=2000 gid=3000") {
		t.Errorf("user 2000:3000: %q", r.Stdout)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"id"}, User: "nobody-here"}); !errors.As(err, &ae) || ae.Status/100 != 4 {
		t.Errorf("a user the image does not name: %v, want a 4xx", err)
	}
	if err := c.WriteFile(ctx, sb.ID, "/work/note.txt", 0o644, strings.NewReader("written through the API\n")); err != nil {
		t.Fatal(err)
	}
	if r := mustExec(t, c, sb.ID, "cat", "/work/note.txt"); r.Stdout != "written through the API\n" {
		t.Errorf("cat: %q", r.Stdout)
	}
	mustExec(t, c, sb.ID, "sh", "-c", "echo from the guest > /tmp/out")
	var out bytes.Buffer
	if err := c.ReadFile(ctx, sb.ID, "/tmp/out", &out); err != nil || out.String() != "from the guest\n" {
		t.Errorf("read back: %q, %v", out.String(), err)
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	checkMainService(t, c, "bb")
	if _, err := c.Health(ctx); err != nil {
		t.Errorf("hostd unhealthy: %v", err)
	}
}

// execAs runs argv in sandbox id as user.
func execAs(t *testing.T, c *client.Client, id, user string, argv ...string) client.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: argv, User: user})
	if err != nil {
		t.Fatalf("exec %v as %s: %v", argv, user, err)
	}
	return r
}

// checkMainService starts a sandbox of template tpl (busyboxImage's) with
// start: its Entrypoint and Cmd run as a background session, as the
// image's USER in its working dir with its env, and stay readable.
func checkMainService(t *testing.T, c *client.Client, tpl string) {
	t.Helper()
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tpl, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	if sb.MainExecID == "" {
		t.Fatal("create with start: no main_exec_id")
	}
	got := readLine(t, c, sb.ID, "/tmp/main.txt")
	if got != "main 1000 /work from-image\n" {
		t.Errorf("the main service wrote %q, want it run as 1000 in /work with the image's env", got)
	}
	list, err := c.ListExecs(ctx, sb.ID)
	if err != nil || len(list) == 0 || list[0].ExecID != sb.MainExecID || !list[0].Running {
		t.Errorf("sessions: %+v, %v, want the main service running", list, err)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out strings.Builder
	err = c.Attach(actx, sb.ID, sb.MainExecID, 0, func(ev client.Event) error {
		out.Write(ev.Data)
		if strings.Contains(out.String(), "started\n") {
			cancel()
		}
		return nil
	})
	if !strings.Contains(out.String(), "started\n") {
		t.Errorf("attach to the main service: %q, %v", out.String(), err)
	}
	_, err = c.CreateSandbox(ctx, client.CreateSandboxRequest{Start: true})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 {
		t.Errorf("start without a template: %v, want 400", err)
	}
}

// readLine waits (up to 2 min) until the file at path in sandbox id holds a
// whole line, as a main service writes it, and returns what it holds.
func readLine(t *testing.T, c *client.Client, id, path string) string {
	t.Helper()
	var got bytes.Buffer
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got.Reset()
		if err := c.ReadFile(context.Background(), id, path, &got); err == nil && strings.HasSuffix(got.String(), "\n") {
			break
		}
	}
	return got.String()
}
