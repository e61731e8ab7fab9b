package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// errorOf decodes an error response.
func errorOf(t *testing.T, resp *http.Response) ErrorBody {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type: got %q, want application/json", ct)
	}
	var e Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("decode error body: %v", err)
	}
	return e.Error
}

func wantError(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status: got %d, want %d", resp.StatusCode, status)
	}
	if got := errorOf(t, resp); got.Code != code {
		t.Errorf("code: got %q (%s), want %q", got.Code, got.Message, code)
	}
}

func TestStatusMapping(t *testing.T) {
	pathErr := func(errno syscall.Errno) error {
		return fmt.Errorf("agent: %w", &fs.PathError{Op: "open", Path: "/x", Err: errno})
	}
	tests := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"sandbox not found", fmt.Errorf("get sb9: %w", sandbox.ErrNotFound), 404, CodeSandboxNotFound},
		{"template not found", fmt.Errorf("%w: py", sandbox.ErrTemplateNotFound), 404, CodeTemplateNotFound},
		{"not running", sandbox.ErrNotRunning, 409, CodeSandboxNotRunning},
		{"deleted", sandbox.ErrDeleted, 409, CodeSandboxDeleted},
		{"invalid", sandbox.ErrInvalid, 400, CodeInvalidRequest},
		{"bad path", sandbox.ErrBadPath, 400, CodeBadPath},
		{"exec start", fmt.Errorf("exec: %w", sandbox.ErrExecStart), 422, CodeExecFailed},
		{"ENOENT", pathErr(syscall.ENOENT), 404, CodeFileNotFound},
		{"EACCES", pathErr(syscall.EACCES), 403, CodePermissionDenied},
		{"EPERM", pathErr(syscall.EPERM), 403, CodePermissionDenied},
		{"EISDIR", pathErr(syscall.EISDIR), 400, CodeIsDirectory},
		{"ENOTDIR", pathErr(syscall.ENOTDIR), 400, CodeNotADirectory},
		{"EEXIST", pathErr(syscall.EEXIST), 409, CodeFileExists},
		{"ENOTEMPTY", pathErr(syscall.ENOTEMPTY), 409, CodeDirectoryNotEmpty},
		{"ENAMETOOLONG", pathErr(syscall.ENAMETOOLONG), 400, CodeNameTooLong},
		{"ELOOP", pathErr(syscall.ELOOP), 400, CodeTooManyLinks},
		{"EXDEV", pathErr(syscall.EXDEV), 409, CodeCrossDevice},
		{"EROFS", pathErr(syscall.EROFS), 409, CodeReadOnly},
		{"ETXTBSY", pathErr(syscall.ETXTBSY), 409, CodeFileBusy},
		{"EFBIG", pathErr(syscall.EFBIG), 413, CodeFileTooLarge},
		{"ENOSPC", pathErr(syscall.ENOSPC), 507, CodeNoSpace},
		{"EDQUOT", pathErr(syscall.EDQUOT), 507, CodeNoSpace},
		{"agent lost", fmt.Errorf("exec: %w: closed", sandbox.ErrAgentLost), 502, CodeAgentLost},
		{"snapshot not found", fmt.Errorf("create: %w: sn-1", sandbox.ErrSnapshotNotFound), 404, CodeSnapshotNotFound},
		{"deadline", fmt.Errorf("agent: %w", context.DeadlineExceeded), 504, CodeTimeout},
		{"other", errors.New("disk on fire"), 500, CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t)
			env.m.SetErr(tc.err)
			resp := env.do(t, "GET", "/v1/sandboxes/sb1/files/stat?path=/x", nil)
			wantError(t, resp, tc.status, tc.code)
		})
	}
}

func TestAuth(t *testing.T) {
	tests := []struct {
		name, method, target, key string
		status                    int
	}{
		{"no key", "GET", "/v1/sandboxes", "", 401},
		{"wrong key", "GET", "/v1/sandboxes", "ab_wrong", 401},
		{"right key", "GET", "/v1/sandboxes", testKey, 200},
		{"exec without key", "POST", "/v1/sandboxes/sb1/exec", "", 401},
		{"files without key", "GET", "/v1/sandboxes/sb1/files?path=/etc", "", 401},
		{"unknown route without key", "GET", "/v1/nope", "", 401},
		{"unknown route with key", "GET", "/v1/nope", testKey, 404},
		{"wrong method with key", "PATCH", "/v1/sandboxes", testKey, 405},
		{"healthz without key", "GET", "/healthz", "", 200},
		{"openapi without key", "GET", "/openapi.yaml", "", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t)
			resp := env.doKey(t, tc.key, tc.method, tc.target, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status: got %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.status == 401 {
				wantError(t, resp, 401, CodeUnauthorized)
				if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
					t.Errorf("WWW-Authenticate: got %q, want Bearer ...", got)
				}
				if calls := env.m.Calls(); len(calls) != 0 {
					t.Errorf("manager calls: got %v, want none", calls)
				}
			}
		})
	}
}

func TestAuthStoreFailure(t *testing.T) {
	env := newTestEnv(t)
	env.keys.SetErr(errors.New("database is locked"))
	wantError(t, env.do(t, "GET", "/v1/sandboxes", nil), 500, CodeInternal)
}

func TestRouteErrorsAreJSON(t *testing.T) {
	env := newTestEnv(t)
	wantError(t, env.do(t, "GET", "/v1/nope", nil), 404, CodeNotFound)
	resp := env.do(t, "PUT", "/v1/sandboxes", nil)
	if got := resp.Header.Get("Allow"); !strings.Contains(got, "GET") {
		t.Errorf("Allow: got %q, want GET, POST", got)
	}
	wantError(t, resp, 405, CodeMethodNotAllowed)
}

func TestHealthAndSpec(t *testing.T) {
	env := newTestEnv(t)
	var h Health
	if err := json.NewDecoder(env.doKey(t, "", "GET", "/healthz", nil).Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if want := (Health{Status: "ok", VMM: "qemu", Accel: "tcg"}); h != want {
		t.Errorf("healthz: got %+v, want %+v", h, want)
	}
	b, err := io.ReadAll(env.doKey(t, "", "GET", "/openapi.yaml", nil).Body)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(openapiYAML) {
		t.Errorf("GET /openapi.yaml: got %d bytes, want the embedded %d", len(b), len(openapiYAML))
	}
}

func TestBadBody(t *testing.T) {
	tests := []struct {
		name, method, target, body string
		code                       string
	}{
		{"create: broken JSON", "POST", "/v1/sandboxes", `{`, CodeBadBody},
		{"create: unknown field", "POST", "/v1/sandboxes", `{"cpus":2}`, CodeBadBody},
		{"create: wrong type", "POST", "/v1/sandboxes", `{"vcpus":"two"}`, CodeBadBody},
		{"create: trailing data", "POST", "/v1/sandboxes", `{}}`, CodeBadBody},
		{"create: negative", "POST", "/v1/sandboxes", `{"memory_mib":-1}`, CodeInvalidRequest},
		{"exec: empty body", "POST", "/v1/sandboxes/sb1/exec", ``, CodeBadBody},
		{"exec: no cmd", "POST", "/v1/sandboxes/sb1/exec", `{"cmd":[]}`, CodeInvalidRequest},
		{"exec: relative cwd", "POST", "/v1/sandboxes/sb1/exec", `{"cmd":["ls"],"cwd":"tmp"}`, CodeBadPath},
		{"exec: user with a space", "POST", "/v1/sandboxes/sb1/exec", `{"cmd":["ls"],"user":"a b"}`, CodeInvalidRequest},
		{"exec: user with two colons", "POST", "/v1/sandboxes/sb1/exec", `{"cmd":["ls"],"user":"1:2:3"}`, CodeInvalidRequest},
		{"exec: user without a name", "POST", "/v1/sandboxes/sb1/exec", `{"cmd":["ls"],"user":":0"}`, CodeInvalidRequest},
		{"create: start without a template", "POST", "/v1/sandboxes", `{"start":true}`, CodeInvalidRequest},
		{"create: start from a template without an image", "POST", "/v1/sandboxes", `{"start":true,"template":"t"}`, CodeInvalidRequest},
		{"signal: unknown", "POST", "/v1/sandboxes/sb1/exec/e1/signal", `{"signal":"SIGNOPE"}`, CodeInvalidRequest},
		{"move: broken JSON", "POST", "/v1/sandboxes/sb1/files/move", `{"from":`, CodeBadBody},
		{"write: bad mode", "PUT", "/v1/sandboxes/sb1/files?path=/x&mode=999", `x`, CodeInvalidParam},
		{"stream: not a bool", "POST", "/v1/sandboxes/sb1/exec?stream=maybe", `{"cmd":["ls"]}`, CodeInvalidParam},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t)
			resp := env.do(t, tc.method, tc.target, strings.NewReader(tc.body))
			wantError(t, resp, 400, tc.code)
		})
	}
}

func TestBadPath(t *testing.T) {
	paths := []string{"etc/passwd", "/etc/../etc/passwd", "/root/..", "..", "/a/%00b"}
	routes := []struct{ method, target, body string }{
		{"GET", "/v1/sandboxes/sb1/files?path=%s", ""},
		{"PUT", "/v1/sandboxes/sb1/files?path=%s", "data"},
		{"DELETE", "/v1/sandboxes/sb1/files?path=%s", ""},
		{"GET", "/v1/sandboxes/sb1/files/list?path=%s", ""},
		{"GET", "/v1/sandboxes/sb1/files/stat?path=%s", ""},
		{"POST", "/v1/sandboxes/sb1/files/mkdir?path=%s", ""},
	}
	for _, rt := range routes {
		for _, p := range paths {
			t.Run(rt.method+" "+rt.target+" "+p, func(t *testing.T) {
				env := newTestEnv(t)
				resp := env.do(t, rt.method, fmt.Sprintf(rt.target, p), strings.NewReader(rt.body))
				wantError(t, resp, 400, CodeBadPath)
				if calls := env.m.Calls(); len(calls) != 0 {
					t.Errorf("manager calls: got %v, want none", calls)
				}
			})
		}
	}
	t.Run("move", func(t *testing.T) {
		env := newTestEnv(t)
		resp := env.do(t, "POST", "/v1/sandboxes/sb1/files/move", strings.NewReader(`{"from":"/a","to":"/b/../../c"}`))
		wantError(t, resp, 400, CodeBadPath)
	})
	t.Run("missing", func(t *testing.T) {
		env := newTestEnv(t)
		wantError(t, env.do(t, "GET", "/v1/sandboxes/sb1/files/stat", nil), 400, CodeInvalidParam)
	})
}

func TestSandboxes(t *testing.T) {
	env := newTestEnv(t)
	resp := env.do(t, "POST", "/v1/sandboxes", strings.NewReader(`{"vcpus":2,"env":{"A":"1"},"metadata":{"owner":"me"}}`))
	if resp.StatusCode != 201 {
		t.Fatalf("create: got %d, want 201", resp.StatusCode)
	}
	var sb Sandbox
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb2" || sb.VCPUs != 2 || sb.Env["A"] != "1" || sb.Metadata["owner"] != "me" || sb.State != SandboxStateRunning {
		t.Errorf("create: got %+v", sb)
	}
	if got := resp.Header.Get("Location"); got != "/v1/sandboxes/sb2" {
		t.Errorf("Location: got %q, want /v1/sandboxes/sb2", got)
	}

	resp = env.do(t, "POST", "/v1/sandboxes", nil)
	if resp.StatusCode != 201 {
		t.Fatalf("create with empty body: got %d, want 201", resp.StatusCode)
	}

	var list SandboxList
	if err := json.NewDecoder(env.do(t, "GET", "/v1/sandboxes", nil).Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range list.Sandboxes {
		ids = append(ids, s.ID)
	}
	if got, want := strings.Join(ids, ","), "sb1,sb2,sb3"; got != want {
		t.Errorf("list: got %v, want %v", got, want)
	}

	raw, err := io.ReadAll(env.do(t, "GET", "/v1/sandboxes/sb1", nil).Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"env":{}`) || !strings.Contains(string(raw), `"error":""`) {
		t.Errorf("get: got %s, want env {} and error \"\"", raw)
	}

	if resp := env.do(t, "DELETE", "/v1/sandboxes/sb1", nil); resp.StatusCode != 204 {
		t.Errorf("delete: got %d, want 204", resp.StatusCode)
	}
	wantError(t, env.do(t, "GET", "/v1/sandboxes/sb1", nil), 404, CodeSandboxNotFound)
	wantError(t, env.do(t, "DELETE", "/v1/sandboxes/sb1", nil), 404, CodeSandboxNotFound)
}

// TestPublicRoutesMatchSpec keeps publicRoutes and the document's security
// in step, and checks that the embedded document is valid OpenAPI.
func TestPublicRoutesMatchSpec(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(openapiYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is invalid: %v", err)
	}
	seen := 0
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			sec := doc.Security
			if op.Security != nil {
				sec = *op.Security
			}
			route := method + " " + p
			public := len(sec) == 0
			if public != publicRoutes[route] {
				t.Errorf("%s: public in document: got %v, in publicRoutes: %v", route, public, publicRoutes[route])
			}
			if strings.HasPrefix(p, "/v1/") && public {
				t.Errorf("%s: /v1 route without security", route)
			}
			if public {
				seen++
			}
		}
	}
	if seen != len(publicRoutes) {
		t.Errorf("public routes in document: got %d, want %d", seen, len(publicRoutes))
	}
}

func TestRequestLog(t *testing.T) {
	var buf syncBuffer
	m := apitest.NewManager()
	if _, err := m.Create(context.Background(), sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := New(Options{
		Manager: m,
		Auth:    auth.New(apitest.NewKeys(auth.Hash(testKey))),
		Logger:  slog.New(slog.NewTextHandler(&buf, nil)),
	})
	req := httptest.NewRequest("GET", "/v1/sandboxes/sb1", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	h.ServeHTTP(httptest.NewRecorder(), req)
	got := buf.String()
	for _, want := range []string{"sandbox_id=sb1", "status=200", `route="GET /v1/sandboxes/{id}"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log: got %q, want it to contain %s", got, want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
