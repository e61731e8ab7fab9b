package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// testKey is the key that newTestEnv's authenticator accepts.
const testKey = "ab_test-key"

var (
	_ Manager       = (*apitest.Manager)(nil)
	_ Authenticator = (*auth.Authenticator)(nil)
)

// emitAll is apitest.EmitAll.
var emitAll = apitest.EmitAll

// testEnv is an API server over a fake manager with one sandbox, "sb1".
type testEnv struct {
	m    *apitest.Manager
	keys *apitest.Keys
	srv  *httptest.Server
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	m := apitest.NewManager()
	if _, err := m.Create(context.Background(), sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.ResetCalls()
	keys := apitest.NewKeys(auth.Hash(testKey))
	h := New(Options{
		Manager: m,
		Auth:    auth.New(keys),
		Health:  func() HealthInfo { return HealthInfo{VMM: "qemu", Accel: "tcg"} },
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testEnv{m: m, keys: keys, srv: srv}
}

// do sends a request with the test key and returns the response; the body
// is closed at the end of the test.
func (e *testEnv) do(t *testing.T, method, target string, body io.Reader) *http.Response {
	t.Helper()
	return e.doKey(t, testKey, method, target, body)
}

func (e *testEnv) doKey(t *testing.T, key, method, target string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+target, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
