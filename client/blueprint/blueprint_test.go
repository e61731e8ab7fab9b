package blueprint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Blueprint
	}{
		{"base only", "base: debian-bookworm\n", Blueprint{Base: "debian-bookworm"}},
		{"all steps", `
base: debian-bookworm
vcpus: 2
memory_mib: 1024
steps:
  - run: apt-get install -y jq
  - copy: {src: ./app, dest: /opt/app}
  - env: {FOO: bar, N: 1}
  - workdir: /opt/app
  - user: app:staff
`, Blueprint{Base: "debian-bookworm", VCPUs: 2, MemoryMiB: 1024, Steps: []Step{
			{Run: "apt-get install -y jq"},
			{Copy: &Copy{Src: "./app", Dest: "/opt/app"}},
			{Env: map[string]string{"FOO": "bar", "N": "1"}},
			{Workdir: "/opt/app"},
			{User: "app:staff"},
		}}},
		{"template", "template: py\nsteps:\n  - run: |\n      a\n      b\n", Blueprint{Template: "py", Steps: []Step{{Run: "a\nb\n"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const base = "base: debian-bookworm\n"
	tests := []struct {
		name string
		in   string
		step int // 0: not a step error
		want string
	}{
		{"empty", "", 0, "give a base"},
		{"both origins", base + "template: x\n", 0, "not both"},
		{"unknown base", "base: alpine\n", 0, `unknown base "alpine"`},
		{"size with template", "template: x\nvcpus: 2\n", 0, "come from the template"},
		{"negative size", base + "memory_mib: -1\n", 0, "negative"},
		{"unknown key", base + "stpes: []\n", 0, "stpes"},
		{"not yaml", "base: [\n", 0, "yaml"},
		{"unknown step", base + "steps:\n  - run: ok\n  - cmd: ls\n", 2, `unknown step "cmd"`},
		{"two keys", base + "steps:\n  - {run: a, workdir: /b}\n", 1, "one key"},
		{"not a mapping", base + "steps:\n  - ls\n", 1, "one key"},
		{"empty run", base + "steps:\n  - run: ''\n", 1, "non-empty string"},
		{"run list", base + "steps:\n  - run: [a, b]\n", 1, "non-empty string"},
		{"relative workdir", base + "steps:\n  - workdir: app\n", 1, "absolute"},
		{"user with spaces", base + "steps:\n  - user: a b\n", 1, "not root, a name or uid"},
		{"user with two colons", base + "steps:\n  - user: a:b:c\n", 1, "not root, a name or uid"},
		{"relative dest", base + "steps:\n  - copy: {src: a, dest: opt}\n", 1, "absolute"},
		{"no src", base + "steps:\n  - copy: {dest: /opt}\n", 1, "src is empty"},
		{"copy typo", base + "steps:\n  - copy: {src: a, dst: /opt}\n", 1, `unknown key "dst"`},
		{"copy string", base + "steps:\n  - copy: a /opt\n", 1, "not a mapping"},
		{"empty env", base + "steps:\n  - env: {}\n", 1, "no variables"},
		{"bad env name", base + "steps:\n  - run: a\n  - run: b\n  - env: {1X: y}\n", 3, `"1X" is not a variable name`},
		{"env list", base + "steps:\n  - env: [A]\n", 1, "mapping"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			var se *StepError
			got := 0
			if errors.As(err, &se) {
				got = se.Step
			}
			if got != tc.step {
				t.Errorf("step: got %d, want %d (%v)", got, tc.step, err)
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "blueprint.yaml")
	if err := os.WriteFile(p, []byte("base: debian-bookworm\nsteps:\n  - run: ''\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(p)
	if err == nil || !strings.Contains(err.Error(), p+": blueprint: step 1") {
		t.Errorf("got %v, want the file name and step", err)
	}
	if _, err := ParseFile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want ErrNotExist", err)
	}
}

func TestStepString(t *testing.T) {
	tests := []struct {
		step Step
		want string
	}{
		{Step{Run: "apt-get install -y jq"}, "RUN apt-get install -y jq"},
		{Step{Run: "set -e\nmake\n"}, "RUN set -e ..."},
		{Step{Copy: &Copy{Src: "./app", Dest: "/opt/app"}}, "COPY ./app /opt/app"},
		{Step{Env: map[string]string{"B": "2", "A": "1"}}, "ENV A=1 B=2"},
		{Step{Workdir: "/opt"}, "WORKDIR /opt"},
		{Step{User: "1000:1000"}, "USER 1000:1000"},
		{Step{Run: "a", Workdir: "/b"}, "INVALID"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.step.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
