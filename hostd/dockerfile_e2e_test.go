//go:build vm

package hostd_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/dockerfile"
)

// TestDockerfileBuild builds a Dockerfile FROM a busybox image (served by
// a registry on loopback) with ENV, WORKDIR, COPY (with a .dockerignore),
// RUN and USER (root over the image's numeric USER for the first lines,
// then a user the Dockerfile adds), starts a sandbox from it, then
// rebuilds after changing the last RUN line: the image template and every
// earlier line are reused.
func TestDockerfileBuild(t *testing.T) {
	ref, _ := serveImage(t, "busybox-tools:1", busyboxToolsImage(t))
	c, _ := startHostd(t)
	ctx := context.Background()

	dir := t.TempDir()
	for n, content := range map[string]string{"app/hello.txt": "hello from the context\n", "app/skip.log": "ignored\n",
		".dockerignore": "**/*.log\n"} {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const addUser = `RUN echo "app:x:1234:1234:app:/srv/app:/bin/sh" >> /etc/passwd && echo "app:x:1234:" >> /etc/group`
	df := func(last string) string {
		p := filepath.Join(dir, "Dockerfile")
		src := "FROM " + ref + "\nUSER root\nENV MODE=test\n" + addUser + "\nWORKDIR /srv/app\nCOPY app/ ./\n" +
			"RUN echo \"built in $(pwd) mode $MODE\" > built.txt && chmod 777 .\nUSER app\nCMD [\"echo main $(id -u) $(pwd) $MODE > /tmp/main.txt; exec sleep 600\"]\n" + last + "\n"
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	build := func(file string) string {
		t.Helper()
		var out bytes.Buffer
		start := time.Now()
		if _, err := dockerfile.Build(ctx, c, "dfapp", file, dockerfile.BuildOptions{Out: &out, Err: &out,
			Image: client.ImageSource{FreeMiB: 64}}); err != nil {
			t.Fatalf("build: %v\n%s", err, out.String())
		}
		t.Logf("Dockerfile build took %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
		return out.String()
	}
	check := func(last string) {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "dfapp"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.DeleteSandbox(ctx, sb.ID)
		res := mustExec(t, c, sb.ID, "sh", "-c", "cat built.txt hello.txt last.txt; echo $MODE; pwd; ls skip.log 2>&1 || true")
		want := "built in /srv/app mode test\nhello from the context\n" + last + "\ntest\n/srv/app\n"
		if !strings.HasPrefix(res.Stdout, want) || strings.Contains(res.Stdout, "\nskip.log\n") {
			t.Errorf("sandbox from the Dockerfile's template: got %q, want %q and no skip.log", res.Stdout, want)
		}
		if res := mustExec(t, c, sb.ID, "cat", dockerfile.ConfigFile); !strings.Contains(res.Stdout, "exec sleep 600") {
			t.Errorf("recorded config: %q", res.Stdout)
		}
		if res := mustExec(t, c, sb.ID, "sh", "-c", "id -u; id -un"); res.Stdout != "1234\napp\n" {
			t.Errorf("USER app: execs run as %q, want app (1234)", res.Stdout)
		}
		if res := execAs(t, c, sb.ID, "root", "id", "-u"); res.Stdout != "0\n" {
			t.Errorf("user root over USER app: %q", res.Stdout)
		}
	}

	out := build(df("RUN echo one > last.txt"))
	if strings.Contains(out, "CACHED") || !strings.Contains(out, "building template "+dockerfile.ImageTemplateName(ref)) {
		t.Errorf("first build: want the image template built and nothing cached")
	}
	check("one")

	out = build(df("RUN echo two > last.txt"))
	var cached, ran []string
	for _, l := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(l, "] CACHED "); ok {
			cached = append(cached, rest)
		} else if strings.HasPrefix(l, "[") {
			_, rest, _ := strings.Cut(l, "] ")
			ran = append(ran, rest)
		}
	}
	wantCached := []string{"USER root", "ENV MODE=test", addUser, "WORKDIR /srv/app", "COPY app/ ./",
		`RUN echo "built in $(pwd) mode $MODE" > built.txt && chmod 777 .`, "USER app"}
	if strings.Join(cached, "\n") != strings.Join(wantCached, "\n") || len(ran) != 2 || ran[0] != "RUN echo two > last.txt" {
		t.Errorf("rebuild: reused %q and ran %q, want %q reused and the last RUN (and the config record) run", cached, ran, wantCached)
	}
	if !strings.Contains(out, "(reused)") {
		t.Errorf("rebuild: the image template was not reused")
	}
	check("two")
	checkDockerfileMain(t, c, "dfapp")
}

// checkDockerfileMain starts a sandbox of tpl with start: the Dockerfile's
// CMD runs after the ENTRYPOINT it inherits (the image's /bin/sh -c, as
// Docker does), as its USER, in its WORKDIR, with its ENV.
func checkDockerfileMain(t *testing.T, c *client.Client, tpl string) {
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
	if got != "main 1234 /srv/app test\n" {
		list, err := c.ListExecs(ctx, sb.ID)
		var out strings.Builder
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = c.Attach(actx, sb.ID, sb.MainExecID, 0, func(ev client.Event) error { out.Write(ev.Data); return nil })
		t.Errorf("the Dockerfile's CMD wrote %q, want it run as app (1234) in /srv/app with MODE=test (sessions %+v, %v; output %q)",
			got, list, err, out.String())
	}
}

// busyboxToolsImage is busyboxImage with a second layer of the applets a
// build's own commands use (mkdir, dirname, chmod).
func busyboxToolsImage(t *testing.T) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, app := range []string{"mkdir", "dirname", "chmod"} {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + app, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777,
			ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(busyboxImage(t), layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
