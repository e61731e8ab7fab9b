package api

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestCarelessRequests are the smaller findings of issue 16's probe: each
// request is refused with a 4xx naming the problem, none creates anything.
func TestCarelessRequests(t *testing.T) {
	srv, _ := newNetEnv(t, true)
	if code, body := call(t, srv, "POST", "/v1/secrets", `{"name":"tok","value":"s3cret"}`); code/100 != 2 {
		t.Fatalf("create secret: %d %s", code, body)
	}
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"null create body", "POST", "/v1/sandboxes", `null`, 400, CodeBadBody},
		{"null create body, spaced", "POST", "/v1/sandboxes", " \n null ", 400, CodeBadBody},
		{"secret_env names a missing secret", "POST", "/v1/sandboxes", `{"secret_env":{"TOKEN":"nope"}}`, 400, CodeSecretNotFound},
		{"inject names a missing secret", "POST", "/v1/sandboxes",
			`{"network":{"mode":"proxy","inject":[{"host":"a.test","header":"Authorization","value":"Bearer {{secret:nope}}"}]}}`, 400, CodeSecretNotFound},
		{"patch inject names a missing secret", "PATCH", "/v1/sandboxes/sb1/network",
			`{"inject":[{"host":"a.test","header":"X","value":"{{secret:nope}}"}]}`, 400, CodeSecretNotFound},
		{"env name with =", "POST", "/v1/sandboxes", `{"env":{"A=B":"c"}}`, 400, CodeInvalidRequest},
		{"secret_env name with =", "POST", "/v1/sandboxes", `{"secret_env":{"A=B":"tok"}}`, 400, CodeInvalidRequest},
		{"timeout_s overflows", "POST", "/v1/sandboxes", `{"timeout_s":9223372037}`, 400, CodeInvalidRequest},
		{"exec timeout_s -1", "POST", "/v1/sandboxes/sb1/exec", `{"cmd":["true"],"timeout_s":-1}`, 400, CodeInvalidRequest},
		{"exec env name with =", "POST", "/v1/sandboxes/sb1/exec", `{"cmd":["true"],"env":{"X=Y":"1"}}`, 400, CodeInvalidRequest},
		{"PUT to a directory path", "PUT", "/v1/sandboxes/sb1/files?path=/root/dir/", "data", 400, CodeBadPath},
		{"unknown snapshot", "GET", "/v1/snapshots/sn-nope", "", 404, CodeSnapshotNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := call(t, srv, c.method, c.path, c.body)
			var e Error
			_ = json.Unmarshal([]byte(body), &e)
			if code != c.status || e.Error.Code != c.code {
				t.Fatalf("got %d %s, want %d %s", code, body, c.status, c.code)
			}
		})
	}
	if code, body := call(t, srv, "GET", "/v1/sandboxes", ""); !strings.Contains(body, `"sandboxes":[]`) {
		t.Fatalf("a refused create made a sandbox: %d %s", code, body)
	}
	if code, body := call(t, srv, "POST", "/v1/sandboxes", `{"secret_env":{"TOKEN":"tok"}}`); code != 201 {
		t.Fatalf("create with an existing secret: %d %s", code, body)
	}
}

// TestNonUTF8FileNamesInTheAPI: a name that is not UTF-8 is listed with
// its exact bytes in raw_name/raw_path (base64) and read back by its
// percent-encoded path.
func TestNonUTF8FileNamesInTheAPI(t *testing.T) {
	env := newTestEnv(t)
	if resp := env.do(t, "PUT", "/v1/sandboxes/sb1/files?path=/caf%E9.txt", strings.NewReader("latin-1")); resp.StatusCode != 204 {
		t.Fatalf("put: %d", resp.StatusCode)
	}
	var list FileList
	if err := json.NewDecoder(env.do(t, "GET", "/v1/sandboxes/sb1/files/list?path=/", nil).Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var fi *FileInfo
	for i, e := range list.Entries {
		if e.RawName != nil {
			fi = &list.Entries[i]
		}
	}
	if fi == nil || string(*fi.RawName) != "caf\xe9.txt" || string(*fi.RawPath) != "/caf\xe9.txt" || fi.Name != "caf\uFFFD.txt" {
		t.Fatalf("listed %+v", list.Entries)
	}
	raw, _ := json.Marshal(fi)
	if !strings.Contains(string(raw), base64.StdEncoding.EncodeToString([]byte("caf\xe9.txt"))) {
		t.Fatalf("raw_name is not base64: %s", raw)
	}
	b, _ := io.ReadAll(env.do(t, "GET", "/v1/sandboxes/sb1/files?path=/caf%E9.txt", nil).Body)
	if string(b) != "latin-1" {
		t.Fatalf("read %q", b)
	}
	for _, e := range list.Entries {
		if e.RawName == nil && e.RawPath != nil {
			t.Errorf("%s: raw_path without raw_name", e.Name)
		}
	}
}
