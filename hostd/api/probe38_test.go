package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSpecEnforced are issue 38's findings that the document already
// forbade: the validator refuses them with a 400 naming the field, before
// any handler runs; and what the handlers answered wrongly.
func TestSpecEnforced(t *testing.T) {
	srv, _ := newNetEnv(t, true)
	long := strings.Repeat("a", 5000)
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, says               string
	}{
		{"boot outside the enum", "POST", "/v1/sandboxes", `{"boot":"warm"}`, 400, CodeInvalidRequest, "boot"},
		{"template ../x", "POST", "/v1/templates", `{"name":"../x","snapshot_id":"sn1"}`, 400, CodeInvalidRequest, "name"},
		{"template .", "POST", "/v1/templates", `{"name":".","snapshot_id":"sn1"}`, 400, CodeInvalidRequest, "name"},
		{"template a/b", "POST", "/v1/templates", `{"name":"a/b","snapshot_id":"sn1"}`, 400, CodeInvalidRequest, "name"},
		{"template of 5000 characters", "POST", "/v1/templates", `{"name":"` + long + `","snapshot_id":"sn1"}`, 400, CodeInvalidRequest, "name"},
		{"create from template ../x", "POST", "/v1/sandboxes", `{"template":"../x"}`, 400, CodeInvalidRequest, "template"},
		{"get template of 5000 characters", "GET", "/v1/templates/" + long, "", 400, CodeInvalidParam, "name"},
		{"unknown template", "GET", "/v1/templates/nope", "", 404, CodeTemplateNotFound, "nope"},
		{"delete unknown template", "DELETE", "/v1/templates/nope", "", 404, CodeTemplateNotFound, "nope"},
		{"move / without to", "POST", "/v1/sandboxes/sb1/files/move", `{"from":"/"}`, 400, CodeInvalidRequest, "to"},
		{"move /", "POST", "/v1/sandboxes/sb1/files/move", `{"from":"/","to":"/x"}`, 400, CodeBadPath, "/"},
		{"move onto /", "POST", "/v1/sandboxes/sb1/files/move", `{"from":"/x","to":"//"}`, 400, CodeBadPath, "/"},
		{"move into itself", "POST", "/v1/sandboxes/sb1/files/move", `{"from":"/a","to":"/a/b"}`, 400, CodeBadPath, "into itself"},
		{"share link for ever", "POST", "/v1/sandboxes/sb1/ports/80/links", `{"expires_in_s":9223372036854775807}`, 400, CodeInvalidRequest, "expires_in_s"},
		{"port out of range", "GET", "/v1/sandboxes/sb1/ports/70000", "", 400, CodeInvalidParam, "port"},
		{"events limit 0", "GET", "/v1/sandboxes/sb1/events?limit=0", "", 400, CodeInvalidParam, "limit"},
		{"allow_ports 0", "PATCH", "/v1/sandboxes/sb1/network", `{"allow_ports":[0]}`, 400, CodeInvalidRequest, "allow_ports"},
		{"unknown field", "POST", "/v1/sandboxes", `{"cpus":2}`, 400, CodeBadBody, "cpus"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := call(t, srv, c.method, c.path, c.body)
			var e Error
			_ = json.Unmarshal([]byte(body), &e)
			if code != c.status || e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.says) {
				t.Fatalf("got %d %s, want %d %s saying %q", code, body, c.status, c.code, c.says)
			}
		})
	}
	for _, name := range []string{"python-data", "browser", "docker", "py", "A1_b.c-d"} {
		if code, body := call(t, srv, "POST", "/v1/templates", `{"name":"`+name+`","snapshot_id":"sn1"}`); code == 400 {
			t.Errorf("template %s: got %d %s, want it accepted", name, code, body)
		}
	}
}

// TestValidationAfterAuth: a request without a key is a 401 however bad
// its body or parameters, and a streamed upload's body is not read as
// JSON.
func TestValidationAfterAuth(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/sandboxes", `{"boot":"warm","exec_timeout_s":18446744074}`},
		{"GET", "/v1/sandboxes/sb1/ports/70000", ""},
		{"GET", "/v1/templates/..", ""},
	} {
		wantError(t, e.doKey(t, "", c.method, c.path, strings.NewReader(c.body)), 401, CodeUnauthorized)
	}
	if resp := e.do(t, "PUT", "/v1/sandboxes/sb1/files?path=/root/a.json", strings.NewReader(`{"boot":"warm"}`)); resp.StatusCode != 204 {
		t.Errorf("upload of a JSON-looking file: got %d, want 204", resp.StatusCode)
	}
	if resp := e.do(t, "PUT", "/v1/sandboxes/sb1/files?path=/root/b&mode=", strings.NewReader("x")); resp.StatusCode != 204 {
		t.Errorf("upload with an empty mode (the Go client's default): got %d, want 204", resp.StatusCode)
	}
	if resp := e.do(t, "PUT", "/v1/sandboxes/sb1/files?path=/root/a&mode=999", strings.NewReader("x")); resp.StatusCode != 400 {
		t.Errorf("upload with mode 999: got %d, want 400", resp.StatusCode)
	}
}
