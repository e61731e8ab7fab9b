package dockerfile

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client/blueprint"
)

// testContext is a build context with a .dockerignore.
func testContext(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"app/main.go": "package main", "app/notes.log": "x", "app/keep.log": "y", "a.txt": "a", "b.txt": "b",
		".dockerignore": "**/*.log\n!app/keep.log\nsecret\n", "secret/key": "k",
		"data.tgz": "\x1f\x8b\x08rest",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func translate(t *testing.T, src string, args map[string]string, base Config) (Translation, *File, error) {
	t.Helper()
	f, err := Parse([]byte(src), args)
	if err != nil {
		return Translation{}, nil, err
	}
	tr, err := f.Translate(testContext(t), base)
	return tr, f, err
}

// brief is a step as the table writes it.
func brief(s blueprint.Step) string {
	switch s.Kind() {
	case blueprint.KindRun:
		return "run " + s.Run + envSuffix(s.RunEnv)
	case blueprint.KindExec:
		return "exec " + strings.Join(s.Exec, "|") + envSuffix(s.RunEnv)
	case blueprint.KindCopy:
		return "copy " + s.Copy.Src + " " + s.Copy.Dest
	case blueprint.KindEnv:
		b, _ := json.Marshal(s.Env)
		return "env " + string(b)
	case blueprint.KindWorkdir:
		return "workdir " + s.Workdir
	case blueprint.KindFile:
		return "file " + s.File.Path
	case blueprint.KindUser:
		return "user " + s.User
	}
	return "?"
}

func envSuffix(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m)
	return " " + string(b)
}

func TestTranslate(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		args      map[string]string
		base      Config
		from      string
		steps     []string
		cfg       func(Config) bool
	}{
		{name: "run forms", src: "FROM base:debian-bookworm\nRUN echo hi && true\nRUN [\"/bin/echo\", \"a b\"]\n",
			from: "base:debian-bookworm", steps: []string{"run echo hi && true", "exec /bin/echo|a b"}},
		{name: "env and workdir expand", src: "FROM busybox\nENV A=1 B=two\nENV C=${A}x\nWORKDIR /opt\nWORKDIR app/$B\nRUN pwd\n",
			from: "busybox", steps: []string{`env {"A":"1","B":"two"}`, `env {"C":"1x"}`, "workdir /opt", "workdir /opt/app/two", "run pwd"}},
		{name: "args", src: "ARG TAG=3.19\nFROM reg.example/alpine:$TAG\nARG V=def\nARG W\nRUN echo $V\nCOPY a.txt /$V/\n",
			args: map[string]string{"W": "given"}, from: "reg.example/alpine:3.19",
			steps: []string{`run echo $V {"V":"def","W":"given"}`, "copy a.txt /def/"}},
		{name: "build arg overrides default", src: "FROM x\nARG V=def\nRUN true\n", args: map[string]string{"V": "cli"},
			from: "x", steps: []string{`run true {"V":"cli"}`}},
		{name: "copy forms", src: "FROM x\nWORKDIR /w\nCOPY app dst\nCOPY a.txt b.txt /m/\nCOPY *.txt ./\nADD a.txt /f\n",
			from: "x", steps: []string{"workdir /w", "copy app /w/dst", "copy a.txt /m/", "copy b.txt /m/",
				"copy a.txt /w/", "copy b.txt /w/", "copy a.txt /f"}},
		{name: "recorded config", src: "FROM template:py\nUSER nobody\nEXPOSE 8080/tcp 9090\nCMD python app.py\nENTRYPOINT [\"/e\"]\nLABEL k=v\n",
			base: Config{Env: map[string]string{"PATH": "/bin"}}, from: "template:py",
			steps: []string{"user nobody", "file " + ConfigFile}, cfg: func(c Config) bool {
				return c.User == "nobody" && reflect.DeepEqual(c.ExposedPorts, []string{"8080/tcp", "9090"}) &&
					reflect.DeepEqual(c.Cmd, []string{"/bin/sh", "-c", "python app.py"}) &&
					reflect.DeepEqual(c.Entrypoint, []string{"/e"}) && c.Labels["k"] == "v" && c.Env["PATH"] == "/bin" && c.WorkingDir == "/"
			}},
		{name: "run as users", src: "FROM x\nUSER root\nRUN id\nUSER app:staff\nRUN id\n", from: "x",
			steps: []string{"user root", "run id", "user app:staff", "run id", "file " + ConfigFile}},
		{name: "user from an arg", src: "FROM x\nARG U=1000\nUSER $U:$U\nRUN id\n", from: "x",
			steps: []string{"user 1000:1000", `run id {"U":"1000"}`, "file " + ConfigFile}, cfg: func(c Config) bool { return c.User == "1000:1000" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, f, err := translate(t, tc.src, tc.args, tc.base)
			if err != nil {
				t.Fatal(err)
			}
			if f.From != tc.from {
				t.Errorf("from: got %q, want %q", f.From, tc.from)
			}
			var got []string
			for _, s := range tr.Steps {
				got = append(got, brief(s))
				if s.Label == "" {
					t.Errorf("step %s has no label", brief(s))
				}
			}
			if !reflect.DeepEqual(got, tc.steps) {
				t.Errorf("steps:\n got %q\nwant %q", got, tc.steps)
			}
			if tc.cfg != nil && !tc.cfg(tr.Config) {
				t.Errorf("config: got %+v", tr.Config)
			}
			if err := (blueprint.Blueprint{Template: "t", Steps: tr.Steps}).Validate(); err != nil {
				t.Errorf("steps do not validate: %v", err)
			}
		})
	}
}

func TestTranslateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		want      string
	}{
		{"multi-stage", "FROM a AS one\nRUN x\nFROM b\n", 3, "multi-stage"},
		{"run mount", "FROM a\nRUN --mount=type=cache,target=/c true\n", 2, "RUN --mount"},
		{"run network", "FROM a\nRUN --network=none true\n", 2, "RUN --network"},
		{"copy from", "FROM a\nCOPY --from=b /x /y\n", 2, "COPY --from"},
		{"copy chown", "FROM a\nCOPY --chown=1:1 a.txt /y\n", 2, "COPY --chown"},
		{"healthcheck", "FROM a\nRUN true\nHEALTHCHECK CMD true\n", 3, "HEALTHCHECK is not supported"},
		{"volume", "FROM a\nVOLUME /data\n", 2, "VOLUME is not supported"},
		{"onbuild", "FROM a\nONBUILD RUN x\n", 2, "ONBUILD is not supported"},
		{"shell", "FROM a\nSHELL [\"/bin/bash\", \"-c\"]\n", 2, "SHELL is not supported"},
		{"stopsignal", "FROM a\nSTOPSIGNAL SIGTERM\n", 2, "STOPSIGNAL is not supported"},
		{"platform", "FROM --platform=linux/arm64 a\n", 1, "--platform"},
		{"add url", "FROM a\nADD https://example.invalid/x /x\n", 2, "ADD of a URL"},
		{"add archive", "FROM a\nADD data.tgz /x/\n", 2, "local archive"},
		{"empty user", "FROM a\nUSER ${U}\n", 2, "USER names no user"},
		{"two words for a user", "FROM a\nUSER 0 0\n", 2, "is not root, a name or uid"},
		{"outside context", "FROM a\nCOPY ../x /x\n", 2, "outside the build context"},
		{"heredoc", "FROM a\nRUN <<EOF\necho hi\nEOF\n", 2, "heredoc"},
		{"multiple sources", "FROM a\nCOPY a.txt b.txt /m\n", 2, "must end with /"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := translate(t, tc.src, nil, Config{})
			var le *LineError
			if !errors.As(err, &le) || le.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a line %d error containing %q", err, tc.line, tc.want)
			}
		})
	}
	for _, src := range []string{"", "RUN x\n", "FROM a\nFOO bar\n"} {
		if _, err := Parse([]byte(src), nil); err == nil {
			t.Errorf("Parse(%q): no error", src)
		}
	}
	_, err := Parse([]byte("FROM a\nFOO bar\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("unknown instruction: got %v, want it to name line 2", err)
	}
}

func TestFromRule(t *testing.T) {
	for arg, want := range map[string][2]string{
		"base:debian-bookworm": {FromBase, "debian-bookworm"}, "template:py": {FromTemplate, "py"},
		"busybox": {"", "busybox"}, "127.0.0.1:5000/bb:1": {"", "127.0.0.1:5000/bb:1"},
	} {
		if k, n := From(arg); k != want[0] || n != want[1] {
			t.Errorf("From(%q) = %q, %q; want %q", arg, k, n, want)
		}
	}
	if a, b := ImageTemplateName("busybox"), ImageTemplateName("busybox:1"); a == b || !strings.HasPrefix(a, "image-") {
		t.Errorf("image template names: %q, %q", a, b)
	}
}
