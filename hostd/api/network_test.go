package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/secrets"
	"github.com/agentbox/agentbox/hostd/store"
)

type fakeNet struct {
	mu  sync.Mutex
	pol egress.Policy
}

func (f *fakeNet) NetworkPolicy(_ context.Context, id string) (egress.Policy, error) {
	if id != "sb1" {
		return egress.Policy{}, fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pol, nil
}

func (f *fakeNet) SetNetworkPolicy(_ context.Context, id string, pol egress.Policy) (egress.Policy, error) {
	if err := pol.Validate(); err != nil {
		return egress.Policy{}, fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pol = pol
	return pol, nil
}

type fakeSecrets struct {
	mu sync.Mutex
	m  map[string]string
}

func (f *fakeSecrets) Put(_ context.Context, name string, value []byte) error {
	if strings.Contains(name, " ") {
		return fmt.Errorf("%w: name", secrets.ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[name] = string(value)
	return nil
}

func (f *fakeSecrets) List(context.Context) ([]store.SecretMeta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.SecretMeta
	for n := range f.m {
		out = append(out, store.SecretMeta{Name: n, CreatedAt: time.Unix(2, 0).UTC()})
	}
	return out, nil
}

func (f *fakeSecrets) Delete(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[name]; !ok {
		return fmt.Errorf("%w: %s", secrets.ErrNotFound, name)
	}
	delete(f.m, name)
	return nil
}

func newNetEnv(t *testing.T, withNet bool) (*httptest.Server, *fakeNet) {
	m := apitest.NewManager()
	fn := &fakeNet{pol: egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"a.test"}}}
	opts := Options{Manager: m, Auth: auth.New(apitest.NewKeys(auth.Hash(testKey)))}
	if withNet {
		opts.Network, opts.Secrets = fn, &fakeSecrets{m: map[string]string{}}
	}
	srv := httptest.NewServer(New(opts))
	t.Cleanup(srv.Close)
	return srv, fn
}

func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestNetworkRoutes(t *testing.T) {
	srv, fn := newNetEnv(t, true)
	if st, body := call(t, srv, "GET", "/v1/sandboxes/sb1/network", ""); st != 200 || !strings.Contains(body, `"allow_ports":[80,443]`) {
		t.Errorf("GET network: %d %s", st, body)
	}
	if st, body := call(t, srv, "POST", "/v1/secrets", `{"name":"k","value":"v"}`); st/100 != 2 {
		t.Fatalf("create secret: %d %s", st, body)
	}
	st, body := call(t, srv, "PATCH", "/v1/sandboxes/sb1/network", `{"allow_ports":[443],"inject":[{"host":"b.test","header":"X-K","value":"{{secret:k}}"}]}`)
	if st != 200 {
		t.Fatalf("PATCH: %d %s", st, body)
	}
	if got := fn.pol; len(got.AllowDomains) != 1 || got.AllowPorts[0] != 443 || got.Inject[0].Host != "b.test" {
		t.Errorf("policy after PATCH: %+v (absent fields must stay)", got)
	}
	if st, body := call(t, srv, "PATCH", "/v1/sandboxes/sb1/network", `{"allow_cidrs":["nope"]}`); st != 400 || !strings.Contains(body, "invalid_request") {
		t.Errorf("bad cidr: %d %s", st, body)
	}
	if st, _ := call(t, srv, "PATCH", "/v1/sandboxes/sb1/network", `{"mode":"none"}`); st != 400 {
		t.Errorf("PATCH mode: %d, want 400 (unknown field)", st)
	}
	if st, _ := call(t, srv, "GET", "/v1/sandboxes/nope/network", ""); st != 404 {
		t.Errorf("unknown sandbox: %d", st)
	}
}

func TestSecretRoutesNeverReturnValues(t *testing.T) {
	srv, _ := newNetEnv(t, true)
	const value = "very-secret-value-42"
	st, body := call(t, srv, "POST", "/v1/secrets", `{"name":"gh","value":"`+value+`"}`)
	if st != 201 || strings.Contains(body, value) {
		t.Fatalf("POST: %d %s", st, body)
	}
	st, body = call(t, srv, "GET", "/v1/secrets", "")
	var list SecretList
	if st != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Secrets) != 1 || strings.Contains(body, value) {
		t.Fatalf("GET: %d %s", st, body)
	}
	if st, _ := call(t, srv, "GET", "/v1/secrets/gh", ""); st != 405 && st != 404 {
		t.Errorf("GET one secret: %d, want no such route", st)
	}
	if st, _ := call(t, srv, "POST", "/v1/secrets", `{"name":"bad name","value":"x"}`); st != 400 {
		t.Errorf("bad name: %d", st)
	}
	if st, _ := call(t, srv, "DELETE", "/v1/secrets/gh", ""); st != 204 {
		t.Errorf("DELETE: %d", st)
	}
	if st, body := call(t, srv, "DELETE", "/v1/secrets/gh", ""); st != 404 || !strings.Contains(body, CodeSecretNotFound) {
		t.Errorf("DELETE again: %d %s", st, body)
	}
}

func TestNetworkRoutesWithoutNetwork(t *testing.T) {
	srv, _ := newNetEnv(t, false)
	if st, _ := call(t, srv, "GET", "/v1/secrets", ""); st != 501 {
		t.Errorf("GET /v1/secrets without a store: %d, want 501", st)
	}
}
