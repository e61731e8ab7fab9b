package blueprinttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client/dockerfile"
)

// dockerfileCtx writes a build context with a .dockerignore and the
// Dockerfile src; it returns the Dockerfile's path.
func dockerfileCtx(t *testing.T, dir, src string) string {
	t.Helper()
	for name, content := range map[string]string{"app/main.go": "package main", "app/debug.log": "noise",
		"app/keep.log": "kept", "app/cache/x": "cached", ".dockerignore": "**/*.log\n!app/keep.log\napp/cache\n", "Dockerfile": src} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "Dockerfile")
}

const testDockerfile = `FROM base:debian-bookworm
ARG GREETING=hello
RUN step1 $GREETING
ENV APP_HOME=/opt/app
WORKDIR $APP_HOME
COPY app/ ./
RUN ["step2", "exec form"]
EXPOSE 8080
CMD ["./serve"]
RUN step3
`

func TestDockerfileBuildCachesLines(t *testing.T) {
	env := newBuildEnv(t)
	file := dockerfileCtx(t, env.dir, testDockerfile)
	build := func() (string, error) {
		env.host.Reset()
		var out bytes.Buffer
		_, err := dockerfile.Build(context.Background(), env.c, "df", file, dockerfile.BuildOptions{Out: &out, Err: &out})
		if left, _ := env.host.List(context.Background()); len(left) != 0 {
			t.Errorf("sandboxes left after the build: got %d, want 0", len(left))
		}
		return out.String(), err
	}
	out, err := build()
	if err != nil {
		t.Fatalf("first build: %v\n%s", err, out)
	}
	if got, want := env.runScripts(), []string{"step1 $GREETING", "step2 exec form", "step3"}; !slices.Equal(got, want) {
		t.Errorf("first build ran %q, want %q", got, want)
	}
	for _, ex := range env.host.Execs() {
		switch ex.Script() {
		case "step1 $GREETING":
			if ex.Req.Env["GREETING"] != "hello" {
				t.Errorf("RUN step1 env: got %v, want GREETING=hello", ex.Req.Env)
			}
		case "step2 exec form":
			if !slices.Equal(ex.Req.Cmd, []string{"step2", "exec form"}) || ex.Req.Cwd != "/opt/app" || ex.Req.Env["APP_HOME"] != "/opt/app" {
				t.Errorf("exec-form RUN: got %+v, want argv [step2, exec form] in /opt/app with APP_HOME", ex.Req)
			}
		}
	}
	if _, ok := env.host.File("/opt/app/main.go"); !ok {
		t.Error("COPY: /opt/app/main.go missing")
	}
	for _, p := range []string{"/opt/app/debug.log", "/opt/app/cache/x"} {
		if _, ok := env.host.File(p); ok {
			t.Errorf("COPY: %s copied despite .dockerignore", p)
		}
	}
	if f, ok := env.host.File("/opt/app/keep.log"); !ok || string(f.Data) != "kept" {
		t.Error("COPY: /opt/app/keep.log (a .dockerignore exception) not copied")
	}
	f, ok := env.host.File(dockerfile.ConfigFile)
	var cfg dockerfile.Config
	if !ok || json.Unmarshal(f.Data, &cfg) != nil || !slices.Equal(cfg.Cmd, []string{"./serve"}) ||
		!slices.Equal(cfg.ExposedPorts, []string{"8080"}) || cfg.WorkingDir != "/opt/app" {
		t.Errorf("recorded config: got %q, %v", f.Data, ok)
	}
	if n := strings.Count(out, "CACHED"); n != 0 {
		t.Errorf("first build: %d CACHED lines in %q", n, out)
	}

	// Change the last line: everything before it is reused.
	dockerfileCtx(t, env.dir, strings.Replace(testDockerfile, "RUN step3", "RUN step3 changed", 1))
	out, err = build()
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	if got, want := env.runScripts(), []string{"step3 changed"}; !slices.Equal(got, want) {
		t.Errorf("rebuild ran %q, want %q", got, want)
	}
	var cached []string
	for _, l := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(l, "] CACHED "); ok {
			cached = append(cached, rest)
		}
	}
	want := []string{"RUN step1 $GREETING", "ENV APP_HOME=/opt/app", "WORKDIR $APP_HOME", "COPY app/ ./", `RUN ["step2", "exec form"]`}
	if !slices.Equal(cached, want) {
		t.Errorf("rebuild reused %q, want %q\n%s", cached, want, out)
	}
	if c := env.host.Creates(); len(c) != 1 || c[0].Snapshot == "" {
		t.Errorf("rebuild created %+v, want one sandbox from a step snapshot", c)
	}

	// A changed ARG reruns from the first RUN that sees it.
	env.host.Reset()
	var buf bytes.Buffer
	if _, err := dockerfile.Build(context.Background(), env.c, "df", file, dockerfile.BuildOptions{Out: &buf,
		BuildArgs: map[string]string{"GREETING": "hi"}}); err != nil {
		t.Fatal(err)
	}
	if got := env.runScripts(); len(got) != 3 {
		t.Errorf("with a new build arg ran %q, want all 3 RUN lines", got)
	}
}

func TestDockerfileFromTemplate(t *testing.T) {
	env := newBuildEnv(t)
	base := dockerfileCtx(t, t.TempDir(), "FROM base:debian-bookworm\nRUN step-base\n")
	if _, err := dockerfile.Build(context.Background(), env.c, "basetpl", base, dockerfile.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"template:basetpl", "basetpl"} {
		file := dockerfileCtx(t, t.TempDir(), "FROM "+from+"\nRUN step-child "+from+"\n")
		env.host.Reset()
		if _, err := dockerfile.Build(context.Background(), env.c, "child", file, dockerfile.BuildOptions{}); err != nil {
			t.Fatalf("FROM %s: %v", from, err)
		}
		if c := env.host.Creates(); len(c) != 1 || c[0].Template != "basetpl" {
			t.Errorf("FROM %s created %+v, want one sandbox of template basetpl", from, c)
		}
	}
	file := dockerfileCtx(t, t.TempDir(), "FROM template:nope\nRUN x\n")
	if _, err := dockerfile.Build(context.Background(), env.c, "child", file, dockerfile.BuildOptions{}); err == nil ||
		!strings.Contains(err.Error(), "line 1") {
		t.Errorf("FROM an unknown template: got %v, want an error naming line 1", err)
	}
}
