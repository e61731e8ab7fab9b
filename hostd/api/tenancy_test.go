package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
)

// tenantEnv is an API over the fake manager with a real store of projects,
// keys and owners, and a key of each of two projects' members and an admin.
type tenantEnv struct {
	m                 *apitest.Manager
	st                *store.Store
	srv               *httptest.Server
	log               *syncBuffer
	admin, a, b       string
	adminID, aID, bID string
}

func newTenantEnv(t *testing.T, quotas map[string]Quota) *tenantEnv {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &tenantEnv{m: apitest.NewManager(), st: st, log: &syncBuffer{}}
	newKey := func(project, role string) (string, string) {
		key, rec, err := auth.NewRecord(role+"-of-"+project, project, role, time.Time{})
		if err == nil {
			err = st.CreateAPIKey(ctx, rec, auth.Hash(key))
		}
		if err != nil {
			t.Fatal(err)
		}
		return key, rec.ID
	}
	for _, p := range []string{"alpha", "beta"} {
		if _, err := st.CreateProject(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	e.admin, e.adminID = newKey(store.DefaultProject, store.RoleAdmin)
	e.a, e.aID = newKey("alpha", store.RoleMember)
	e.b, e.bID = newKey("beta", store.RoleMember)
	rec := recorder.New(recorder.Options{Store: st, KeyName: KeyID})
	h := New(Options{Manager: e.m, Auth: auth.New(st), Tenancy: st, Quotas: quotas, Events: rec, Logger: slog.New(slog.NewTextHandler(e.log, nil)),
		Network: &fakeNet{pol: egress.Policy{Mode: egress.ModeProxy}}, Secrets: &fakeSecrets{m: map[string]string{}}})
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// call sends body (JSON, or none if "") with key and returns the status and
// the body.
func (e *tenantEnv) call(t *testing.T, key, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func errCode(body string) string {
	var e Error
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// alphaResources makes, with alpha's key, a sandbox, a snapshot of it, a
// template of the snapshot and a secret, and returns their path values.
func (e *tenantEnv) alphaResources(t *testing.T) map[string]string {
	t.Helper()
	var sb Sandbox
	st, body := e.call(t, e.a, "POST", "/v1/sandboxes", `{}`)
	if st != 201 || json.Unmarshal([]byte(body), &sb) != nil {
		t.Fatalf("alpha's create: %d %s", st, body)
	}
	var sn Snapshot
	st, body = e.call(t, e.a, "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", `{}`)
	if st != 201 || json.Unmarshal([]byte(body), &sn) != nil {
		t.Fatalf("alpha's snapshot: %d %s", st, body)
	}
	if st, body := e.call(t, e.a, "POST", "/v1/templates", `{"name":"tpl-alpha","snapshot_id":"`+sn.ID+`"}`); st != 201 {
		t.Fatalf("alpha's template: %d %s", st, body)
	}
	if st, body := e.call(t, e.a, "POST", "/v1/secrets", `{"name":"sec-alpha","value":"v"}`); st != 201 {
		t.Fatalf("alpha's secret: %d %s", st, body)
	}
	return map[string]string{"id": sb.ID, "snapshot_id": sn.ID, "template": "tpl-alpha", "secret": "sec-alpha",
		"exec_id": "e1", "port": "8080", "key_id": e.aID}
}

// withoutResource are the operations whose path names no resource: each
// says what beta's key is to get from it.
var withoutResource = map[string]string{
	"getHealth": "public", "getOpenAPI": "public",
	"listSandboxes": "list", "listSnapshots": "list", "listTemplates": "list", "listSecrets": "list", "listKeys": "list",
	"createSandbox": "create", "createTemplate": "create", "createSecret": "create",
	// A build's calls are the caller's own (internal/templatebuild), each
	// checked as the route it is.
	"buildTemplateFromContext": "create",
	"getMetrics":               "admin", "createKey": "admin", "rotateKey": "admin", "createProject": "admin", "listProjects": "admin",
}

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// TestTenancyWalksEverySpecOperation sends every operation of the spec
// with beta's key and alpha's ids: each that names a resource of alpha
// answers 404, with the code of an id that does not exist; each list
// leaves alpha's ids out; the rest are in withoutResource or the test
// fails, so a new endpoint is covered when it is added.
func TestTenancyWalksEverySpecOperation(t *testing.T) {
	e := newTenantEnv(t, nil)
	ids := e.alphaResources(t)
	doc, err := openapi3.NewLoader().LoadFromData(openapiYAML)
	if err != nil {
		t.Fatal(err)
	}
	alphaIDs := []string{ids["id"], ids["snapshot_id"], ids["template"], ids["secret"], e.aID}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := op.OperationID
			t.Run(name, func(t *testing.T) {
				params := pathParam.FindAllStringSubmatch(path, -1)
				if len(params) == 0 {
					e.checkNoResource(t, name, method, path, alphaIDs)
					return
				}
				if _, ok := withoutResource[name]; ok {
					t.Fatalf("%s names a resource in its path and is in withoutResource", name)
				}
				real, fake := path, path
				for _, p := range params {
					v, ok := ids[p[1]]
					if p[1] == "name" {
						v, ok = ids[strings.TrimSuffix(strings.TrimPrefix(path, "/v1/"), "s/{name}")], true
					}
					if !ok || v == "" {
						t.Fatalf("%s: no id for path parameter %s: add it to alphaResources", name, p[0])
					}
					real = strings.Replace(real, p[0], v, 1)
					if p[1] == "exec_id" || p[1] == "port" {
						fake = strings.Replace(fake, p[0], v, 1)
					} else {
						fake = strings.Replace(fake, p[0], "nope-"+v, 1)
					}
				}
				real, fake = real+"?path=/&offset=0", fake+"?path=/&offset=0"
				st, body := e.call(t, e.b, method, real, `{}`)
				wantSt, wantBody := e.call(t, e.b, method, fake, `{}`)
				if st != http.StatusNotFound || errCode(body) != errCode(wantBody) || wantSt != http.StatusNotFound {
					t.Errorf("%s %s with beta's key: got %d %s, want 404 as for no such id (%d %s)", method, real, st, body, wantSt, wantBody)
				}
				for _, id := range alphaIDs[1:] {
					if strings.Contains(body, id) && !strings.Contains(real, id) {
						t.Errorf("%s %s: the answer names alpha's %s: %s", method, real, id, body)
					}
				}
			})
		}
	}
	// What alpha made is alpha's to use.
	if st, body := e.call(t, e.a, "GET", "/v1/sandboxes/"+ids["id"], ""); st != 200 {
		t.Errorf("alpha's own sandbox: got %d %s, want 200", st, body)
	}
	if st, body := e.call(t, e.a, "GET", "/v1/snapshots/"+ids["snapshot_id"], ""); st != 200 {
		t.Errorf("alpha's own snapshot: got %d %s, want 200", st, body)
	}
}

// checkNoResource checks an operation of withoutResource with beta's key.
func (e *tenantEnv) checkNoResource(t *testing.T, name, method, path string, alphaIDs []string) {
	kind, ok := withoutResource[name]
	if !ok {
		t.Fatalf("operation %s (%s %s) names no resource and is not in withoutResource: say what beta's key gets from it", name, method, path)
	}
	switch kind {
	case "public":
	case "list":
		st, body := e.call(t, e.b, method, path, "")
		if st != 200 {
			t.Fatalf("%s: got %d %s, want 200", name, st, body)
		}
		for _, id := range alphaIDs {
			if strings.Contains(body, id) {
				t.Errorf("%s with beta's key lists alpha's %s: %s", name, id, body)
			}
		}
		if st, body := e.call(t, e.b, method, path+"?project=alpha", ""); st != http.StatusForbidden {
			t.Errorf("%s?project=alpha with a member's key: got %d %s, want 403", name, st, body)
		}
		st, body = e.call(t, e.admin, method, path+"?project=alpha", "")
		if name != "listKeys" && name != "listSecrets" && (st != 200 || !strings.Contains(body, alphaIDs[0]) && !strings.Contains(body, alphaIDs[1]) && !strings.Contains(body, alphaIDs[2])) {
			t.Errorf("%s?project=alpha with the admin's key: got %d %s, want alpha's", name, st, body)
		}
	case "admin":
		if st, body := e.call(t, e.b, method, path, `{"name":"x"}`); st != http.StatusForbidden {
			t.Errorf("%s with a member's key: got %d %s, want 403", name, st, body)
		}
	case "create":
		// Checked by TestTenancyCreatesFromAnotherProject.
	default:
		t.Fatalf("%s: unknown class %q", name, kind)
	}
}

// TestTenancyCreatesFromAnotherProject: a create, template or secret that
// names another project's snapshot, template or secret finds none.
func TestTenancyCreatesFromAnotherProject(t *testing.T) {
	e := newTenantEnv(t, nil)
	ids := e.alphaResources(t)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"restore alpha's snapshot", "POST", "/v1/sandboxes", `{"snapshot":"` + ids["snapshot_id"] + `"}`, 404, CodeSnapshotNotFound},
		{"create from alpha's template", "POST", "/v1/sandboxes", `{"template":"tpl-alpha"}`, 404, CodeSandboxNotFound},
		{"use alpha's secret", "POST", "/v1/sandboxes", `{"secret_env":{"T":"sec-alpha"}}`, 400, CodeSecretNotFound},
		{"inject alpha's secret", "POST", "/v1/sandboxes", `{"network":{"inject":[{"host":"a.test","header":"X","value":"{{secret:sec-alpha}}"}]}}`, 400, CodeSecretNotFound},
		{"template of alpha's snapshot", "POST", "/v1/templates", `{"name":"t2","snapshot_id":"` + ids["snapshot_id"] + `"}`, 404, CodeSnapshotNotFound},
		{"overwrite alpha's template", "POST", "/v1/templates", `{"name":"tpl-alpha"}`, 409, CodeNameTaken},
		{"overwrite alpha's secret", "POST", "/v1/secrets", `{"name":"sec-alpha","value":"stolen"}`, 409, CodeNameTaken},
		{"share a template as a member", "POST", "/v1/templates", `{"name":"t3","shared":true}`, 403, CodeForbidden},
		{"revoke alpha's key", "DELETE", "/v1/keys/" + e.aID, "", 404, CodeKeyNotFound},
		{"make a key as a member", "POST", "/v1/keys", `{"project":"alpha"}`, 403, CodeForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, body := e.call(t, e.b, tc.method, tc.path, tc.body)
			if st != tc.status || errCode(body) != tc.code {
				t.Errorf("got %d %s, want %d %s", st, body, tc.status, tc.code)
			}
		})
	}
	// A template the admin shares is every project's to create from, and
	// no member's to delete.
	var sb Sandbox
	_, body := e.call(t, e.admin, "POST", "/v1/sandboxes", `{}`)
	_ = json.Unmarshal([]byte(body), &sb)
	_, body = e.call(t, e.admin, "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", `{}`)
	var sn Snapshot
	_ = json.Unmarshal([]byte(body), &sn)
	if st, body := e.call(t, e.admin, "POST", "/v1/templates", `{"name":"py","shared":true,"snapshot_id":"`+sn.ID+`"}`); st != 201 {
		t.Fatalf("shared template: %d %s", st, body)
	}
	if st, body := e.call(t, e.b, "POST", "/v1/sandboxes", `{"template":"py"}`); st != 201 {
		t.Errorf("create from the shared template: got %d %s, want 201", st, body)
	}
	if st, body := e.call(t, e.b, "GET", "/v1/templates", ""); !strings.Contains(body, `"py"`) || strings.Contains(body, "tpl-alpha") {
		t.Errorf("beta's templates: got %d %s, want py only", st, body)
	}
	if st, body := e.call(t, e.b, "DELETE", "/v1/templates/py", ""); st != http.StatusForbidden {
		t.Errorf("a member deletes the shared template: got %d %s, want 403", st, body)
	}
	if st, body := e.call(t, e.b, "GET", "/v1/snapshots/"+sn.ID, ""); st != 404 {
		t.Errorf("the shared template's snapshot: got %d %s, want 404", st, body)
	}
}

// TestTenancyEventsNameTheKeyID: the flight recorder and the request log
// name a call's key by its id, never the key.
func TestTenancyEventsNameTheKeyID(t *testing.T) {
	e := newTenantEnv(t, nil)
	ids := e.alphaResources(t)
	st, body := e.call(t, e.a, "GET", "/v1/sandboxes/"+ids["id"]+"/events", "")
	if st != 200 || !strings.Contains(body, e.aID) || strings.Contains(body, e.a) {
		t.Errorf("events: got %d %s, want the key id %s and never the key", st, body, e.aID)
	}
	if log := e.log.String(); !strings.Contains(log, "key_id="+e.aID) || !strings.Contains(log, "project=alpha") || strings.Contains(log, e.a) {
		t.Errorf("request log: got %q, want key_id=%s and project=alpha, never the key", log, e.aID)
	}
}

func TestTenancyKeyLifecycle(t *testing.T) {
	e := newTenantEnv(t, nil)
	st, body := e.call(t, e.admin, "POST", "/v1/keys", `{"name":"ci","project":"beta","expires_in_s":3600}`)
	var ck CreatedKey
	if st != 201 || json.Unmarshal([]byte(body), &ck) != nil || ck.Key.Project != "beta" || ck.Key.Role != "member" ||
		ck.Key.ExpiresAt == nil || !strings.HasPrefix(ck.Secret, auth.KeyPrefix+ck.Key.Prefix) {
		t.Fatalf("create key: got %d %s", st, body)
	}
	if st, body := e.call(t, e.admin, "POST", "/v1/keys", `{"project":"nope"}`); st != 404 || errCode(body) != CodeProjectNotFound {
		t.Errorf("key of an unknown project: got %d %s, want 404", st, body)
	}
	st, body = e.call(t, e.admin, "GET", "/v1/keys?project=beta", "")
	if st != 200 || !strings.Contains(body, ck.Key.ID) || strings.Contains(body, ck.Secret) || strings.Contains(body, auth.Hash(ck.Secret)) {
		t.Errorf("list keys: got %d %s, want the new key without its secret or hash", st, body)
	}
	if st, _ := e.call(t, ck.Secret, "GET", "/v1/sandboxes", ""); st != 200 {
		t.Errorf("the new key: got %d, want 200", st)
	}
	if st, body := e.call(t, e.admin, "DELETE", "/v1/keys/"+ck.Key.ID, ""); st != 204 {
		t.Fatalf("revoke: got %d %s", st, body)
	}
	if st, _ := e.call(t, ck.Secret, "GET", "/v1/sandboxes", ""); st != 401 {
		t.Errorf("the revoked key's next call: got %d, want 401", st)
	}
	if st, body := e.call(t, e.admin, "POST", "/v1/projects", `{"name":"gamma"}`); st != 201 {
		t.Errorf("create project: got %d %s", st, body)
	}
	if st, body := e.call(t, e.admin, "POST", "/v1/projects", `{"name":"gamma"}`); st != 409 || errCode(body) != CodeProjectExists {
		t.Errorf("create it again: got %d %s, want 409", st, body)
	}
	if st, body := e.call(t, e.admin, "GET", "/v1/projects", ""); st != 200 || !strings.Contains(body, "gamma") {
		t.Errorf("list projects: got %d %s", st, body)
	}
}

func TestTenancyQuotas(t *testing.T) {
	e := newTenantEnv(t, map[string]Quota{"alpha": {Sandboxes: 2, MemoryMiB: 1536}})
	if st, body := e.call(t, e.a, "POST", "/v1/sandboxes", `{"memory_mib":1024}`); st != 201 {
		t.Fatalf("first: %d %s", st, body)
	}
	st, body := e.call(t, e.a, "POST", "/v1/sandboxes", `{"memory_mib":1024}`)
	if st != http.StatusTooManyRequests || errCode(body) != CodeQuotaExceeded || !strings.Contains(body, "memory_mib is 1536") {
		t.Errorf("over memory: got %d %s, want 429 quota_exceeded naming memory_mib", st, body)
	}
	if st, body := e.call(t, e.a, "POST", "/v1/sandboxes", `{"memory_mib":512}`); st != 201 {
		t.Fatalf("second: %d %s", st, body)
	}
	st, body = e.call(t, e.a, "POST", "/v1/sandboxes", `{"memory_mib":1}`)
	if st != http.StatusTooManyRequests || !strings.Contains(body, "sandboxes is 2") {
		t.Errorf("third sandbox: got %d %s, want 429 naming sandboxes", st, body)
	}
	if st, body := e.call(t, e.b, "POST", "/v1/sandboxes", `{"memory_mib":1024}`); st != 201 {
		t.Errorf("beta has no quota: got %d %s", st, body)
	}
	var list SandboxList
	_, body = e.call(t, e.a, "GET", "/v1/sandboxes", "")
	_ = json.Unmarshal([]byte(body), &list)
	ids := make([]string, 0, len(list.Sandboxes))
	for _, sb := range list.Sandboxes {
		ids = append(ids, sb.ID)
	}
	slices.Sort(ids)
	if len(ids) != 2 {
		t.Errorf("alpha's sandboxes: got %v, want 2", ids)
	}
	if st, body := e.call(t, e.a, "POST", "/v1/sandboxes/"+ids[0]+"/fork", `{"count":1}`); st != http.StatusTooManyRequests {
		t.Errorf("fork over the quota: got %d %s, want 429", st, body)
	}
}

// TestTenancyDeletedSandboxEvents: a deleted sandbox's events stay its
// project's, and no other's.
func TestTenancyDeletedSandboxEvents(t *testing.T) {
	e := newTenantEnv(t, nil)
	ids := e.alphaResources(t)
	if st, body := e.call(t, e.a, "DELETE", "/v1/sandboxes/"+ids["id"], ""); st != 204 {
		t.Fatalf("delete: %d %s", st, body)
	}
	if st, body := e.call(t, e.a, "GET", "/v1/sandboxes/"+ids["id"]+"/events", ""); st != 200 {
		t.Errorf("alpha's deleted sandbox's events: got %d %s, want 200", st, body)
	}
	if st, body := e.call(t, e.b, "GET", "/v1/sandboxes/"+ids["id"]+"/events", ""); st != 404 {
		t.Errorf("beta: got %d %s, want 404", st, body)
	}
}

// TestTenancyUnownedTemplate: a template with no owner (hostd's own) is no
// member's to use or replace, and an admin's.
func TestTenancyUnownedTemplate(t *testing.T) {
	e := newTenantEnv(t, nil)
	if _, err := e.m.CreateTemplate(context.Background(), "base", "sn-x", 0); err != nil {
		t.Fatal(err)
	}
	if st, body := e.call(t, e.b, "POST", "/v1/templates", `{"name":"base"}`); st != 409 || errCode(body) != CodeNameTaken {
		t.Errorf("a member replaces it: got %d %s, want 409 name_taken", st, body)
	}
	if st, body := e.call(t, e.b, "GET", "/v1/templates/base", ""); st != 404 {
		t.Errorf("a member reads it: got %d %s, want 404", st, body)
	}
	if st, body := e.call(t, e.admin, "GET", "/v1/templates/base", ""); st != 200 {
		t.Errorf("the admin reads it: got %d %s, want 200", st, body)
	}
}

// TestTenancyQuotaConcurrentCreates: creates at once take the project no
// further than its quota (admissions in flight are reserved).
func TestTenancyQuotaConcurrentCreates(t *testing.T) {
	e := newTenantEnv(t, map[string]Quota{"alpha": {Sandboxes: 3}})
	codes := make(chan int, 10)
	for range 10 {
		go func() {
			st, _ := e.call(t, e.a, "POST", "/v1/sandboxes", `{}`)
			codes <- st
		}()
	}
	n := 0
	for range 10 {
		if <-codes == 201 {
			n++
		}
	}
	if n != 3 {
		t.Errorf("creates admitted: got %d, want 3", n)
	}
}

// TestTenancySnapshotQuota: a snapshot is refused once the project's
// snapshots reach snapshot_bytes.
func TestTenancySnapshotQuota(t *testing.T) {
	e := newTenantEnv(t, map[string]Quota{"alpha": {SnapshotBytes: 1 << 20}})
	ids := e.alphaResources(t) // one snapshot of 1 MiB
	st, body := e.call(t, e.a, "POST", "/v1/sandboxes/"+ids["id"]+"/snapshots", `{}`)
	if st != http.StatusTooManyRequests || !strings.Contains(body, "snapshot_bytes is 1048576") {
		t.Errorf("a snapshot over the quota: got %d %s, want 429 naming snapshot_bytes", st, body)
	}
}
