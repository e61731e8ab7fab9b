package commands

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/api/blueprinttest"
)

// writeBlueprint writes a blueprint and a file it copies into a new
// directory and returns the blueprint's path.
func writeBlueprint(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "blueprint.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const testBlueprint = `base: debian-bookworm
steps:
  - run: echo building
  - copy: {src: app.txt, dest: /opt/app.txt}
  - env: {MODE: prod}
`

func TestTemplateBuild(t *testing.T) {
	h := blueprinttest.New(t)
	bp := writeBlueprint(t, testBlueprint)

	got := runHost(t, h, "template", "build", "-f", bp, "--pool", "2", "app")
	if got.code != 0 || got.stdout != "app\n" {
		t.Fatalf("build: got %+v, want the name on stdout", got)
	}
	for _, want := range []string{"[1/3] RUN echo building\nbuilding\n", "[2/3] COPY app.txt /opt/app.txt\n", "=> template app"} {
		if !strings.Contains(got.stderr, want) {
			t.Errorf("progress on stderr: got %q, want it to contain %q", got.stderr, want)
		}
	}
	if f, ok := h.File("/opt/app.txt"); !ok || string(f.Data) != "hello" {
		t.Errorf("copied file: got %+v, %v", f, ok)
	}

	got = runHost(t, h, "--json", "template", "build", "app", "-f", bp, "--pool", "2") // flags after the name
	var tmpl client.Template
	if err := json.Unmarshal([]byte(got.stdout), &tmpl); err != nil || tmpl.Name != "app" {
		t.Fatalf("build --json: got %q, %v", got.stdout, err)
	}
	if n := strings.Count(got.stderr, "CACHED"); n != 3 {
		t.Errorf("rebuild: got %d CACHED steps, want 3 in %q", n, got.stderr)
	}
	if got := runHost(t, h, "template", "build", "--no-cache", "-f", bp, "app"); strings.Contains(got.stderr, "CACHED") || got.code != 0 {
		t.Errorf("--no-cache: got %+v, want every step run", got)
	}
	if left, _ := h.List(context.Background()); len(left) != 0 {
		t.Errorf("sandboxes left: got %d, want 0", len(left))
	}
}

func TestTemplateBuildErrors(t *testing.T) {
	tests := []struct {
		name      string
		blueprint string
		args      []string
		code      int
		stderrHas string
	}{
		{"failing step", "base: debian-bookworm\nsteps:\n  - run: echo ok\n  - run: exit 3\n", nil, 1, "step 2: RUN exit 3: exit code 3"},
		{"invalid blueprint", "base: debian-bookworm\nsteps:\n  - workdir: rel\n", nil, 1, "step 1: workdir: must be an absolute"},
		{"missing file", "", []string{"-f", "/nonexistent/bp.yaml"}, 1, "no such file"},
		{"no name", testBlueprint, []string{}, 1, "give the template's name"},
		{"negative pool", testBlueprint, []string{"--pool", "-1"}, 1, "negative"},
		{"unknown flag", testBlueprint, []string{"--nope"}, 2, "nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := blueprinttest.New(t)
			args := []string{"template", "build", "-f", writeBlueprint(t, tc.blueprint)}
			if tc.args != nil {
				args = append(args, tc.args...)
			}
			if tc.name != "no name" {
				args = append(args, "app")
			}
			got := runHost(t, h, args...)
			if got.code != tc.code || !strings.Contains(got.stderr, tc.stderrHas) {
				t.Errorf("got code %d, stderr %q; want %d and %q", got.code, got.stderr, tc.code, tc.stderrHas)
			}
			if got.stdout != "" {
				t.Errorf("stdout: got %q, want nothing", got.stdout)
			}
		})
	}
}

func TestTemplateLsRm(t *testing.T) {
	h := blueprinttest.New(t)
	if got := runHost(t, h, "template", "build", "-f", writeBlueprint(t, testBlueprint), "app"); got.code != 0 {
		t.Fatalf("build: %+v", got)
	}
	got := runHost(t, h, "template", "ls")
	if !strings.HasPrefix(got.stdout, "NAME") || !strings.Contains(got.stdout, "app") || !strings.Contains(got.stdout, "KERNEL") {
		t.Errorf("ls: got %q", got.stdout)
	}
	got = runHost(t, h, "template", "show", "app")
	if !strings.Contains(got.stdout, "name:") || !regexp.MustCompile(`kernel:\s+default`).MatchString(got.stdout) {
		t.Errorf("show: got %+v, want the template with the default kernel", got)
	}
	var list client.TemplateList
	got = runHost(t, h, "--json", "template", "ls")
	if err := json.Unmarshal([]byte(got.stdout), &list); err != nil || len(list.Templates) != 1 {
		t.Errorf("ls --json: got %q, %v", got.stdout, err)
	}
	got = runHost(t, h, "template", "rm", "app", "missing")
	if got.code != 1 || got.stdout != "app\n" || !strings.Contains(got.stderr, "missing") {
		t.Errorf("rm: got %+v, want app removed and missing reported", got)
	}
	if got := runHost(t, h, "template", "ls", "-q"); got.stdout != "" {
		t.Errorf("ls -q after rm: got %q, want nothing", got.stdout)
	}
}

func TestTemplateBuildDockerfile(t *testing.T) {
	h := blueprinttest.New(t)
	dir, ctxDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "app.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	df := filepath.Join(dir, "app.dockerfile")
	if err := os.WriteFile(df, []byte("FROM base:debian-bookworm\nARG V=1\nCOPY app.txt /opt/\nRUN echo $V\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runHost(t, h, "template", "build", "-f", df, "--build-arg", "V=2", "app", ctxDir)
	if got.code != 0 || got.stdout != "app\n" {
		t.Fatalf("build: got %+v, want the name on stdout", got)
	}
	if f, ok := h.File("/opt/app.txt"); !ok || string(f.Data) != "hello" {
		t.Errorf("copied file: got %+v, %v", f, ok)
	}
	if err := os.WriteFile(df, []byte("FROM base:debian-bookworm\nHEALTHCHECK CMD true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got = runHost(t, h, "template", "build", "-f", df, "app", ctxDir)
	if got.code == 0 || !strings.Contains(got.stderr, "line 2: HEALTHCHECK is not supported") {
		t.Errorf("unsupported line: got %+v, want an error naming line 2", got)
	}
}

func TestTemplateBuildKernelNeedsImage(t *testing.T) {
	h := blueprinttest.New(t)
	got := runHost(t, h, "template", "build", "-f", writeBlueprint(t, testBlueprint), "--kernel", "/boot/vmlinuz", "app")
	if got.code == 0 || !strings.Contains(got.stderr, "--kernel and --modules need --image") {
		t.Errorf("blueprint with --kernel: got %+v, want a refusal", got)
	}
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM base:debian-bookworm\nRUN true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got = runHost(t, h, "template", "build", "-f", df, "--kernel", "/boot/vmlinuz", "app")
	if got.code == 0 || !strings.Contains(got.stderr, "line 1: a kernel applies to a FROM image's template only") {
		t.Errorf("Dockerfile FROM base with --kernel: got %+v, want a refusal naming line 1", got)
	}
}
