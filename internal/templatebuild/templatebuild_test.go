package templatebuild_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/api/blueprinttest"
	"github.com/agentbox/agentbox/internal/templatebuild"
)

func newHost(t *testing.T) *blueprinttest.Host {
	return blueprinttest.New(t, func(self func() string) api.TemplateBuilds { return &templatebuild.Builder{URL: self} })
}

// entry is one tar entry: a regular file unless typ says otherwise.
type entry struct {
	name, body string
	typ        byte
	link       string
}

func tarball(t *testing.T, gz bool, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.typ != 0 {
			h.Typeflag, h.Size, h.Linkname, h.Mode = e.typ, 0, e.link, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// result is a build's answer: its status, and the events of a stream or
// the error of a refusal.
type result struct {
	status int
	events []apitypes.TemplateBuildEvent
	err    apitypes.Error
}

func (r result) last() apitypes.TemplateBuildEvent {
	if len(r.events) == 0 {
		return apitypes.TemplateBuildEvent{}
	}
	return r.events[len(r.events)-1]
}

func (r result) log() string {
	var b strings.Builder
	for _, ev := range r.events {
		if ev.Type == apitypes.TemplateBuildEventTypeLog {
			b.WriteString(*ev.Line + "\n")
		}
	}
	return b.String()
}

func build(t *testing.T, h *blueprinttest.Host, q url.Values, body []byte) result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.URL+"/v1/templates/build?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+blueprinttest.Key)
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	res := result{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&res.err); err != nil {
			t.Fatalf("error body: %v", err)
		}
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev apitypes.TemplateBuildEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		res.events = append(res.events, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return res
}

const dockerfileSrc = `FROM base:debian-bookworm
ARG GREETING=hello
RUN echo $GREETING
WORKDIR /opt/app
COPY app/ ./
RUN warn done
`

func TestDockerfileBuild(t *testing.T) {
	h := newHost(t)
	ctx := tarball(t, true, entry{name: "Dockerfile", body: dockerfileSrc}, entry{name: "app/", typ: tar.TypeDir},
		entry{name: "app/main.go", body: "package main"})
	q := url.Values{"name": {"df"}, "dockerfile": {"Dockerfile"}, "build_arg": {"GREETING=hi"}, "pool_size": {"1"}}
	res := build(t, h, q, ctx)
	last := res.last()
	if res.status != 200 || last.Type != apitypes.TemplateBuildEventTypeDone || last.Template.Name != "df" || last.Template.PoolSize != 1 {
		t.Fatalf("build: got %d, last event %+v, want 200 and done with template df of pool 1\n%s", res.status, last, res.log())
	}
	if _, ok := h.File("/opt/app/main.go"); !ok {
		t.Error("COPY: /opt/app/main.go missing")
	}
	for _, want := range []string{"[1/4] RUN echo $GREETING\n", "done\n", "=> template df (snapshot "} {
		if !strings.Contains(res.log(), want) {
			t.Errorf("log: got %q, want it to contain %q", res.log(), want)
		}
	}
	for _, ex := range h.Execs() {
		if ex.Script() == "echo $GREETING" && ex.Req.Env["GREETING"] != "hi" {
			t.Errorf("RUN env: got %v, want the build_arg GREETING=hi", ex.Req.Env)
		}
	}
	var stderr []string
	for _, ev := range res.events {
		if ev.Type == apitypes.TemplateBuildEventTypeLog && *ev.Stream == apitypes.TemplateBuildEventStreamStderr {
			stderr = append(stderr, *ev.Line)
		}
	}
	if len(stderr) != 1 || stderr[0] != "done" {
		t.Errorf("stderr lines: got %q, want [done]", stderr)
	}
	// The same build again is cached: its steps' snapshots are the
	// caller's, found through the API as the CLI finds them.
	again := build(t, h, q, ctx)
	if n := strings.Count(again.log(), "CACHED"); again.last().Type != apitypes.TemplateBuildEventTypeDone || n != 4 {
		t.Errorf("second build: got %d CACHED lines and last %+v, want 4 and done\n%s", n, again.last(), again.log())
	}
}

func TestBlueprintBuild(t *testing.T) {
	h := newHost(t)
	bp := "base: debian-bookworm\nsteps:\n  - run: echo built\n  - copy: {src: ../data, dest: /srv/data}\n"
	ctx := tarball(t, false, entry{name: "bp/blueprint.yaml", body: bp}, entry{name: "data/a.txt", body: "a"})
	res := build(t, h, url.Values{"name": {"bp"}, "blueprint": {"bp/blueprint.yaml"}}, ctx)
	if last := res.last(); last.Type != apitypes.TemplateBuildEventTypeDone || last.Template.Name != "bp" {
		t.Fatalf("build: got last event %+v, want done with template bp\n%s", last, res.log())
	}
	if f, ok := h.File("/srv/data/a.txt"); !ok || string(f.Data) != "a" {
		t.Errorf("copy: /srv/data/a.txt got %q, %v, want a", f.Data, ok)
	}
	if !strings.Contains(res.log(), "built\n") {
		t.Errorf("log: got %q, want the run step's output", res.log())
	}
}

func TestBuildRefusals(t *testing.T) {
	h := newHost(t)
	df := entry{name: "Dockerfile", body: "FROM base:debian-bookworm\nRUN echo hi\n"}
	for _, tc := range []struct {
		name    string
		q       url.Values
		entries []entry
		status  int
		code    string
	}{
		{"both files", url.Values{"dockerfile": {"Dockerfile"}, "blueprint": {"b.yaml"}}, []entry{df}, 400, api.CodeInvalidParam},
		{"no file", url.Values{}, []entry{df}, 400, api.CodeInvalidParam},
		{"file outside", url.Values{"dockerfile": {"../Dockerfile"}}, []entry{df}, 400, api.CodeInvalidParam},
		{"missing file", url.Values{"dockerfile": {"Other"}}, []entry{df}, 400, api.CodeInvalidBuild},
		{"build arg of a blueprint", url.Values{"blueprint": {"b.yaml"}, "build_arg": {"A=1"}}, []entry{df}, 400, api.CodeInvalidParam},
		{"bad build arg", url.Values{"dockerfile": {"Dockerfile"}, "build_arg": {"A"}}, []entry{df}, 400, api.CodeInvalidParam},
		{"symlink", url.Values{"dockerfile": {"Dockerfile"}}, []entry{df, {name: "passwd", typ: tar.TypeSymlink, link: "/etc/passwd"}}, 400, api.CodeInvalidArchive},
		{"hard link", url.Values{"dockerfile": {"Dockerfile"}}, []entry{df, {name: "x", typ: tar.TypeLink, link: "Dockerfile"}}, 400, api.CodeInvalidArchive},
		{"escaping entry", url.Values{"dockerfile": {"Dockerfile"}}, []entry{df, {name: "../evil", body: "x"}}, 400, api.CodeInvalidArchive},
		{"absolute entry", url.Values{"dockerfile": {"Dockerfile"}}, []entry{df, {name: "/evil", body: "x"}}, 400, api.CodeInvalidArchive},
		// Failures during the build end the stream with an error event.
		{"bad Dockerfile", url.Values{"dockerfile": {"Dockerfile"}}, []entry{{name: "Dockerfile", body: "FROM scratch\n"}}, 400, api.CodeInvalidBuild},
		{"bad blueprint", url.Values{"blueprint": {"b.yaml"}}, []entry{{name: "b.yaml", body: "base: nope\n"}}, 400, api.CodeInvalidBuild},
		{"copy from outside", url.Values{"blueprint": {"b.yaml"}}, []entry{{name: "b.yaml", body: "base: debian-bookworm\nsteps:\n  - copy: {src: /etc, dest: /x}\n"}}, 400, api.CodeInvalidBuild},
		{"failed step", url.Values{"dockerfile": {"Dockerfile"}}, []entry{{name: "Dockerfile", body: "FROM base:debian-bookworm\nRUN exit 3\n"}}, 422, api.CodeBuildFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.q.Set("name", "refused")
			res := build(t, h, tc.q, tarball(t, false, tc.entries...))
			status, code := res.status, res.err.Error.Code
			if res.status == 200 {
				last := res.last()
				if last.Type != apitypes.TemplateBuildEventTypeError || last.Status == nil || last.Error == nil {
					t.Fatalf("got last event %+v, want an error", last)
				}
				status, code = *last.Status, last.Error.Code
			}
			if status != tc.status || code != tc.code {
				t.Errorf("got %d %s (%s), want %d %s", status, code, res.err.Error.Message, tc.status, tc.code)
			}
			if left, _ := h.List(t.Context()); len(left) != 0 {
				t.Errorf("sandboxes left: got %d, want 0", len(left))
			}
		})
	}
	if _, err := h.GetTemplate(t.Context(), "refused"); err == nil {
		t.Error("a refused build left a template")
	}
}

func TestNoBuilder(t *testing.T) {
	h := blueprinttest.New(t)
	res := build(t, h, url.Values{"name": {"x"}, "dockerfile": {"Dockerfile"}}, tarball(t, false, entry{name: "Dockerfile", body: "FROM base:debian-bookworm\n"}))
	if res.status != http.StatusNotImplemented {
		t.Errorf("got %d, want 501", res.status)
	}
}
