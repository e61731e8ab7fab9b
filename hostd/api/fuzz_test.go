package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// fuzzRoutes are the requests that carry a body, on the fake manager's
// sandbox sb1 (the port routes need a port service, left out).
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/v1/sandboxes"},
	{"POST", "/v1/sandboxes/sb1/exec"},
	{"POST", "/v1/sandboxes/sb1/exec?stream=false"},
	{"POST", "/v1/sandboxes/sb1/exec/e1/signal"},
	{"PUT", "/v1/sandboxes/sb1/files?path="},
	{"PUT", "/v1/sandboxes/sb1/files/archive?path="},
	{"POST", "/v1/sandboxes/sb1/files/move"},
	{"POST", "/v1/sandboxes/sb1/files/mkdir?path="},
	{"POST", "/v1/sandboxes/sb1/snapshots"},
	{"POST", "/v1/sandboxes/sb1/fork"},
	{"POST", "/v1/sandboxes/sb1/timeout"},
	{"POST", "/v1/templates"},
	{"PATCH", "/v1/sandboxes/sb1/network"},
	{"POST", "/v1/secrets"},
}

// FuzzRequestBody sends any body (and path parameter) to the real
// handlers over the fake manager: no panic, no 5xx (the fake manager
// fails nothing, so a 5xx is the API's own bug), and every error is the
// API's JSON error object.
func FuzzRequestBody(f *testing.F) {
	for i := range fuzzRoutes {
		for _, b := range []string{"", "null", "{}", "[]", `{"unknown":1}`, "{", `"str"`, "1e400"} {
			f.Add(uint8(i), "/tmp/x", []byte(b))
		}
	}
	for _, s := range []struct {
		route uint8
		body  string
	}{
		{0, `{"template":"t","vcpus":2,"memory_mib":512,"env":{"A":"b"},"timeout_s":60,"cpu_quota":1e308}`},
		{0, `{"vcpus":-1,"memory_mib":1e10,"secret_env":{"X=Y":"s"},"network":{"mode":"proxy","allow_domains":["*."]}}`},
		{1, `{"cmd":["sh","-c","echo hi"],"env":{"A":"b"},"cwd":"/","timeout_s":-1,"stdin":"x"}`},
		{1, `{"cmd":[],"shell":"echo"}`},
		{4, "file content"},
		{6, `{"from":"/a","to":"/b"}`},
		{10, `{"timeout_s":9223372037}`},
		{10, `{"timeout_s":-9223372036854775808}`},
		{12, `{"allow_domains":["x.test"],"allow_cidrs":["10.0.0.0/8"],"allow_ports":[0,65536]}`},
		{13, `{"name":"a/b","value":"v"}`},
	} {
		f.Add(s.route, "/tmp/x", []byte(s.body))
	}
	m := apitest.NewManager()
	if _, err := m.Create(context.Background(), sandbox.CreateOptions{}); err != nil {
		f.Fatal(err)
	}
	h := New(Options{Manager: m, Auth: auth.New(apitest.NewKeys(auth.Hash(testKey))),
		Health:  func() HealthInfo { return HealthInfo{VMM: "qemu", Accel: "tcg"} },
		Network: &fakeNet{pol: egress.Policy{Mode: egress.ModeProxy}}, Secrets: &fakeSecrets{m: map[string]string{}}})
	f.Fuzz(func(t *testing.T, route uint8, param string, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		target := rt.path
		if strings.HasSuffix(target, "path=") {
			target += url.QueryEscape(param)
		}
		req := httptest.NewRequest(rt.method, target, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %s with %q: %d %s", rt.method, target, body, w.Code, w.Body.Bytes())
		}
		if w.Code >= 400 {
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" {
				t.Fatalf("%s %s: %d with a body that is not an API error: %q", rt.method, target, w.Code, w.Body.Bytes())
			}
		}
		if w.Code == http.StatusCreated && rt.path == "/v1/sandboxes" {
			// Each created sandbox stays in the fake; keep it small.
			var info struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(w.Body.Bytes(), &info) == nil && info.ID != "" && info.ID != "sb1" {
				_ = m.Delete(context.Background(), info.ID)
			}
		}
	})
}
