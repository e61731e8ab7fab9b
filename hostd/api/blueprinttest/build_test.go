package blueprinttest_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/blueprint"
	"github.com/agentbox/agentbox/hostd/api/blueprinttest"
)

type buildEnv struct {
	host *blueprinttest.Host
	c    *client.Client
	dir  string // the blueprint's directory
}

func newBuildEnv(t *testing.T) *buildEnv {
	t.Helper()
	h := blueprinttest.New(t)
	c, err := client.New(h.URL, blueprinttest.Key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string]string{"app/main.go": "package main", "app/bin/run.sh": "#!/bin/sh"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "app/bin/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "app/bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	return &buildEnv{host: h, c: c, dir: dir}
}

type buildResult struct {
	tmpl      client.Template
	err       error
	out, err2 string
}

func (e *buildEnv) build(t *testing.T, bp blueprint.Blueprint, opts blueprint.BuildOptions) buildResult {
	t.Helper()
	e.host.Reset()
	var out, errb bytes.Buffer
	opts.Out, opts.Err, opts.BaseDir = &out, &errb, e.dir
	tmpl, err := blueprint.Build(context.Background(), e.c, "app", bp, opts)
	if left, _ := e.host.List(context.Background()); len(left) != 0 {
		t.Errorf("sandboxes left after the build: got %d, want 0", len(left))
	}
	return buildResult{tmpl: tmpl, err: err, out: out.String(), err2: errb.String()}
}

// runScripts are the sh -c scripts of the run steps that ran.
func (e *buildEnv) runScripts() []string {
	var out []string
	for _, ex := range e.host.Execs() {
		if s := ex.Script(); strings.HasPrefix(s, "step") {
			out = append(out, s)
		}
	}
	return out
}

func sevenSteps() blueprint.Blueprint {
	return blueprint.Blueprint{Base: "debian-bookworm", VCPUs: 2, Steps: []blueprint.Step{
		{Run: "step1"},
		{Env: map[string]string{"A": "it's"}},
		{Workdir: "/opt/app"},
		{Run: "step4"},
		{Copy: &blueprint.Copy{Src: "app", Dest: "/opt/app"}},
		{Run: "step6"},
		{Run: "step7"},
	}}
}

func TestBuildCachesSteps(t *testing.T) {
	env := newBuildEnv(t)
	first := env.build(t, sevenSteps(), blueprint.BuildOptions{Pool: 2})
	if first.err != nil {
		t.Fatalf("first build: %v\n%s", first.err, first.out)
	}
	if got, want := env.runScripts(), []string{"step1", "step4", "step6", "step7"}; !slices.Equal(got, want) {
		t.Errorf("first build ran %v, want %v", got, want)
	}
	if c := env.host.Creates(); len(c) != 1 || c[0].VCPUs != 2 || c[0].Snapshot != "" {
		t.Errorf("first build created %+v, want one sandbox of 2 vcpus from the base", c)
	}
	for _, want := range []string{"FROM base:debian-bookworm\n", "[1/7] RUN step1\n", "[2/7] ENV A=it's\n",
		"[5/7] COPY app /opt/app\n    copied 2 files, 2 directories, 21 B\n", "=> template app (snapshot "} {
		if !strings.Contains(first.out, want) {
			t.Errorf("progress: got %q, want it to contain %q", first.out, want)
		}
	}
	if first.tmpl.Name != "app" || first.tmpl.PoolSize != 2 || first.tmpl.SnapshotID == "" {
		t.Errorf("template: got %+v", first.tmpl)
	}
	snaps := stepSnapshots(t, env)
	if len(snaps) != 7 || snaps[6].ID != first.tmpl.SnapshotID {
		t.Fatalf("step snapshots: got %+v, want 7 with the last the template's", snaps)
	}

	again := env.build(t, sevenSteps(), blueprint.BuildOptions{Pool: 2})
	if again.err != nil || again.tmpl.SnapshotID != first.tmpl.SnapshotID {
		t.Fatalf("second build: got %+v, %v, want the same snapshot", again.tmpl, again.err)
	}
	if c, r := env.host.Creates(), env.runScripts(); len(c) != 0 || len(r) != 0 {
		t.Errorf("fully cached build created %d sandboxes and ran %v, want none", len(c), r)
	}
	if n := strings.Count(again.out, "CACHED"); n != 7 || !strings.Contains(again.out, "=> template app unchanged") {
		t.Errorf("CACHED lines: got %d, want 7 and the template unchanged in %q", n, again.out)
	}

	noCache := env.build(t, sevenSteps(), blueprint.BuildOptions{NoCache: true})
	if noCache.err != nil || len(env.runScripts()) != 4 || strings.Contains(noCache.out, "CACHED") {
		t.Errorf("--no-cache: got %v, ran %v, want every step run", noCache.err, env.runScripts())
	}
}

// stepSnapshots lists the host's step snapshots, oldest first.
func stepSnapshots(t *testing.T, env *buildEnv) []client.Snapshot {
	t.Helper()
	all, err := env.c.ListSnapshots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []client.Snapshot
	for _, sn := range all {
		if sn.Kind == "step" && sn.CacheKey != "" {
			out = append(out, sn)
		}
	}
	return out
}

func TestBuildResumesAfterChange(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, env *buildEnv, bp *blueprint.Blueprint)
	}{
		{"copied file changed", func(t *testing.T, env *buildEnv, _ *blueprint.Blueprint) {
			if err := os.WriteFile(filepath.Join(env.dir, "app/main.go"), []byte("package app"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"step 5 changed", func(t *testing.T, _ *buildEnv, bp *blueprint.Blueprint) {
			bp.Steps[4].Copy.Dest = "/srv/app"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newBuildEnv(t)
			if first := env.build(t, sevenSteps(), blueprint.BuildOptions{}); first.err != nil {
				t.Fatal(first.err)
			}
			step4 := stepSnapshots(t, env)[3]
			bp := sevenSteps()
			tc.change(t, env, &bp)
			got := env.build(t, bp, blueprint.BuildOptions{})
			if got.err != nil {
				t.Fatal(got.err)
			}
			if c := env.host.Creates(); len(c) != 1 || c[0].Snapshot != step4.ID {
				t.Errorf("created %+v, want one sandbox from step 4's snapshot %s", c, step4.ID)
			}
			if r := env.runScripts(); !slices.Equal(r, []string{"step6", "step7"}) {
				t.Errorf("ran %v, want [step6 step7]", r)
			}
			if n := strings.Count(got.out, "CACHED"); n != 4 {
				t.Errorf("CACHED lines: got %d, want 4 in %q", n, got.out)
			}
			// The cached env and workdir steps still apply to later run steps.
			for _, ex := range env.host.Execs() {
				if ex.Script() == "step6" && (ex.Req.Env["A"] != "it's" || ex.Req.Cwd != "/opt/app") {
					t.Errorf("step 6 ran with env %v, cwd %q, want A=it's in /opt/app", ex.Req.Env, ex.Req.Cwd)
				}
			}
		})
	}
}

func TestBuildGuestEffects(t *testing.T) {
	env := newBuildEnv(t)
	if got := env.build(t, sevenSteps(), blueprint.BuildOptions{}); got.err != nil {
		t.Fatal(got.err)
	}
	f, ok := env.host.File("/opt/app/bin/run.sh")
	if !ok || string(f.Data) != "#!/bin/sh" || f.Mode != 0o755 {
		t.Errorf("copied file: got %+v, %v, want its content and mode 0755", f, ok)
	}
	if f, ok := env.host.File("/opt/app/main.go"); !ok || f.Mode != 0o644 {
		t.Errorf("copied file: got %+v, %v, want mode 0644", f, ok)
	}
	var profile, workdir, chmod bool
	for _, ex := range env.host.Execs() {
		cmd := strings.Join(ex.Req.Cmd, " ")
		switch {
		case strings.Contains(cmd, blueprint.ProfileFile):
			profile = string(ex.Req.Stdin) == "export A='it'\\''s'\n"
		case strings.Contains(cmd, blueprint.WorkdirFile):
			workdir = slices.Contains(ex.Req.Cmd, "/opt/app")
		case cmd == "chmod 700 /opt/app/bin":
			chmod = true
		}
	}
	if !profile || !workdir || !chmod {
		t.Errorf("guest commands: profile %v, workdir %v, chmod %v, want all; ran %+v", profile, workdir, chmod, env.host.Execs())
	}
}

func TestBuildFailures(t *testing.T) {
	tests := []struct {
		name     string
		bp       blueprint.Blueprint
		step     int
		exitCode int // of a *RunError; 0: none
		want     string
	}{
		{"run exits non-zero", blueprint.Blueprint{Base: "debian-bookworm", Steps: []blueprint.Step{
			{Run: "step1"}, {Run: "exit 3"}, {Run: "step3"}}}, 2, 3, "blueprint: step 2: RUN exit 3: exit code 3"},
		{"missing copy source", blueprint.Blueprint{Base: "debian-bookworm", Steps: []blueprint.Step{
			{Copy: &blueprint.Copy{Src: "nope", Dest: "/x"}}}}, 1, 0, "step 1: copy"},
		{"unknown template", blueprint.Blueprint{Template: "nope"}, 0, 0, "template nope"},
		{"invalid", blueprint.Blueprint{Base: "debian-bookworm", Steps: []blueprint.Step{{}}}, 1, 0, "exactly one"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newBuildEnv(t)
			got := env.build(t, tc.bp, blueprint.BuildOptions{})
			if got.err == nil || !strings.Contains(got.err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", got.err, tc.want)
			}
			var se *blueprint.StepError
			if step := 0; errors.As(got.err, &se) {
				step = se.Step
				if step != tc.step {
					t.Errorf("step: got %d, want %d", step, tc.step)
				}
			} else if tc.step != 0 {
				t.Errorf("got %T, want a *StepError", got.err)
			}
			var re *blueprint.RunError
			if errors.As(got.err, &re) != (tc.exitCode != 0) || (re != nil && re.ExitCode != tc.exitCode) {
				t.Errorf("run error: got %v, want exit code %d", re, tc.exitCode)
			}
			if ts, _ := env.c.ListTemplates(context.Background()); len(ts) != 0 {
				t.Errorf("templates after a failed build: got %d, want 0", len(ts))
			}
		})
	}
}

func TestBuildZeroSteps(t *testing.T) {
	env := newBuildEnv(t)
	bp := blueprint.Blueprint{Base: "debian-bookworm", MemoryMiB: 1024}
	first := env.build(t, bp, blueprint.BuildOptions{})
	if first.err != nil || first.tmpl.SnapshotID == "" {
		t.Fatalf("got %+v, %v", first.tmpl, first.err)
	}
	if c := env.host.Creates(); len(c) != 1 || c[0].MemoryMiB != 1024 {
		t.Errorf("created %+v, want one 1024 MiB sandbox", c)
	}
	again := env.build(t, bp, blueprint.BuildOptions{})
	if again.err != nil || again.tmpl.SnapshotID != first.tmpl.SnapshotID || len(env.host.Creates()) != 0 {
		t.Errorf("rebuild: got %+v, %v, %d creates, want the cached snapshot", again.tmpl, again.err, len(env.host.Creates()))
	}
}

func TestBuildOnTemplate(t *testing.T) {
	env := newBuildEnv(t)
	base := env.build(t, blueprint.Blueprint{Base: "debian-bookworm", Steps: []blueprint.Step{{Run: "step1"}}}, blueprint.BuildOptions{})
	if base.err != nil {
		t.Fatal(base.err)
	}
	bp := blueprint.Blueprint{Template: "app", Steps: []blueprint.Step{{Run: "echo hello"}, {Run: "warn careful"}}}
	got := env.build(t, bp, blueprint.BuildOptions{})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if c := env.host.Creates(); len(c) != 1 || c[0].Template != "app" {
		t.Errorf("created %+v, want one sandbox from template app", c)
	}
	if want := "FROM template:app@" + base.tmpl.SnapshotID + "\n"; !strings.Contains(got.out, want) {
		t.Errorf("progress: got %q, want %q", got.out, want)
	}
	if !strings.Contains(got.out, "[1/2] RUN echo hello\nhello\n") || got.err2 != "careful\n" {
		t.Errorf("streams: got stdout %q, stderr %q", got.out, got.err2)
	}
}

func TestScanModes(t *testing.T) {
	env := newBuildEnv(t)
	bp := blueprint.Blueprint{Base: "debian-bookworm", Steps: []blueprint.Step{
		{Copy: &blueprint.Copy{Src: "app/bin/run.sh", Dest: "/usr/local/bin/"}},
	}}
	if got := env.build(t, bp, blueprint.BuildOptions{}); got.err != nil || !strings.Contains(got.out, "copied 1 file, 9 B") {
		t.Fatalf("got %v, %q", got.err, got.out)
	}
	f, ok := env.host.File("/usr/local/bin/run.sh")
	if !ok || f.Mode != fs.FileMode(0o755) {
		t.Errorf("copied file into a directory: got %+v, %v", f, ok)
	}
}

func TestBuildOutputEndsLines(t *testing.T) {
	env := newBuildEnv(t)
	bp := blueprint.Blueprint{Base: "debian-bookworm", Steps: []blueprint.Step{{Run: "printf partial"}, {Run: "step2"}}}
	got := env.build(t, bp, blueprint.BuildOptions{})
	if want := "[1/2] RUN printf partial\npartial\n[2/2] RUN step2\n"; got.err != nil || !strings.Contains(got.out, want) {
		t.Errorf("got %q, %v, want it to contain %q", got.out, got.err, want)
	}
}

func TestBuildFallsBackFromUnusableCache(t *testing.T) {
	env := newBuildEnv(t)
	if got := env.build(t, sevenSteps(), blueprint.BuildOptions{}); got.err != nil {
		t.Fatal(got.err)
	}
	env.host.Corrupt(stepSnapshots(t, env)[5].ID)
	bp := sevenSteps()
	bp.Steps[6].Run = "step7 changed"
	got := env.build(t, bp, blueprint.BuildOptions{})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if !strings.Contains(got.err2, "cannot start from cached snapshot") {
		t.Errorf("stderr: got %q, want a warning about the cached snapshot", got.err2)
	}
	if r := env.runScripts(); !slices.Equal(r, []string{"step1", "step4", "step6", "step7 changed"}) {
		t.Errorf("ran %v, want every run step", r)
	}
}
