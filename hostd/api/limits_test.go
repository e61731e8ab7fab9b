package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
)

func TestMetricsNeedTheKey(t *testing.T) {
	h := New(Options{Manager: apitest.NewManager(), Auth: auth.New(apitest.NewKeys(auth.Hash(testKey))),
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "agentbox_up 1\n") })})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e := &testEnv{srv: srv}
	if resp := e.doKey(t, "", "GET", "/metrics", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a key: got %d, want 401", resp.StatusCode)
	}
	resp := e.do(t, "GET", "/metrics", nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "agentbox_up 1") {
		t.Fatalf("got %d %q, want 200 with the metrics", resp.StatusCode, b)
	}
}

func TestUsageAndTimeout(t *testing.T) {
	e := newTestEnv(t)
	resp := e.do(t, "GET", "/v1/sandboxes/sb1/usage", nil)
	var u Usage
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("usage: got %d, %v", resp.StatusCode, err)
	}
	resp = e.do(t, "POST", "/v1/sandboxes/sb1/timeout", strings.NewReader(`{"timeout_s":60}`))
	var sb Sandbox
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil || resp.StatusCode != http.StatusOK || sb.Deadline == nil {
		t.Fatalf("timeout: got %d, %v, deadline %v", resp.StatusCode, err, sb.Deadline)
	}
	if resp := e.do(t, "POST", "/v1/sandboxes/nope/timeout", strings.NewReader(`{"timeout_s":60}`)); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown sandbox: got %d, want 404", resp.StatusCode)
	}
}
