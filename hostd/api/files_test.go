package api

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentbox/agentbox/hostd/api/apitest"
)

func TestFiles(t *testing.T) {
	env := newTestEnv(t)
	resp := env.do(t, "PUT", "/v1/sandboxes/sb1/files?path=/hello.sh&mode=4755", strings.NewReader("#!/bin/sh\necho hi\n"))
	if resp.StatusCode != 204 {
		t.Fatalf("put: got %d, want 204", resp.StatusCode)
	}
	if got, want := mustFile(t, env, "/hello.sh").Mode, fs.ModeSetuid|0o755; got != want {
		t.Errorf("mode: got %v, want %v", got, want)
	}
	body, err := io.ReadAll(env.do(t, "GET", "/v1/sandboxes/sb1/files?path=/hello.sh", nil).Body)
	if err != nil || string(body) != "#!/bin/sh\necho hi\n" {
		t.Errorf("get: got %q, %v", body, err)
	}

	var fi FileInfo
	if err := json.NewDecoder(env.do(t, "GET", "/v1/sandboxes/sb1/files/stat?path=/hello.sh", nil).Body).Decode(&fi); err != nil {
		t.Fatal(err)
	}
	if fi.Name != "hello.sh" || fi.Size != 18 || fi.Mode != 0o4755 || fi.IsDir {
		t.Errorf("stat: got %+v", fi)
	}

	if resp := env.do(t, "POST", "/v1/sandboxes/sb1/files/mkdir?path=/a/b", nil); resp.StatusCode != 204 {
		t.Errorf("mkdir: got %d, want 204", resp.StatusCode)
	}
	var list FileList
	if err := json.NewDecoder(env.do(t, "GET", "/v1/sandboxes/sb1/files/list?path=/", nil).Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list.Entries {
		names = append(names, e.Name)
	}
	if got, want := strings.Join(names, ","), "a,hello.sh"; got != want {
		t.Errorf("list: got %v, want %v", got, want)
	}

	wantError(t, env.do(t, "GET", "/v1/sandboxes/sb1/files?path=/a", nil), 400, CodeIsDirectory)
	wantError(t, env.do(t, "GET", "/v1/sandboxes/sb1/files?path=/missing", nil), 404, CodeFileNotFound)

	resp = env.do(t, "POST", "/v1/sandboxes/sb1/files/move", strings.NewReader(`{"from":"/hello.sh","to":"/a/hello.sh"}`))
	if resp.StatusCode != 204 {
		t.Errorf("move: got %d, want 204", resp.StatusCode)
	}
	if resp := env.do(t, "DELETE", "/v1/sandboxes/sb1/files?path=/a&recursive=true", nil); resp.StatusCode != 204 {
		t.Errorf("remove: got %d, want 204", resp.StatusCode)
	}
	if calls := env.m.Calls(); !strings.Contains(strings.Join(calls, ";"), "Remove recursive=true") {
		t.Errorf("calls: got %v, want a recursive Remove", calls)
	}
}

func TestWriteFileDefaultMode(t *testing.T) {
	env := newTestEnv(t)
	if resp := env.do(t, "PUT", "/v1/sandboxes/sb1/files?path=/x", strings.NewReader("x")); resp.StatusCode != 204 {
		t.Fatalf("put: got %d, want 204", resp.StatusCode)
	}
	if got := mustFile(t, env, "/x").Mode; got != 0o644 {
		t.Errorf("mode: got %v, want 0644", got)
	}
}

func TestReadFileAbortsMidStream(t *testing.T) {
	tests := []struct {
		name    string
		r       io.Reader
		status  int
		wantErr bool
	}{
		{"fails before any byte", iotest.ErrReader(errors.New("agent: channel reset")), 500, false},
		{"fails after some bytes", io.MultiReader(strings.NewReader(strings.Repeat("x", 100<<10)), iotest.ErrReader(errors.New("agent: channel reset"))), 200, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t)
			env.m.SetReadFile(func(string) (io.ReadCloser, error) { return io.NopCloser(tc.r), nil })
			resp := env.do(t, "GET", "/v1/sandboxes/sb1/files?path=/big", nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status: got %d, want %d", resp.StatusCode, tc.status)
			}
			_, err := io.ReadAll(resp.Body)
			if (err != nil) != tc.wantErr {
				t.Errorf("reading body: got err %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}

func mustFile(t *testing.T, env *testEnv, path string) apitest.File {
	t.Helper()
	f, ok := env.m.File(path)
	if !ok {
		t.Fatalf("guest file %s: missing", path)
	}
	return f
}
