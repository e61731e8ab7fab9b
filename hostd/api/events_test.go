package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
)

// newEventsEnv is an API over the fake manager with a real event log.
func newEventsEnv(t *testing.T) (*testEnv, *recorder.Recorder) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rec := recorder.New(recorder.Options{Store: st, KeyName: KeyName})
	m := apitest.NewManager()
	if _, err := m.Create(context.Background(), sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	keys := apitest.NewKeys(auth.Hash(testKey))
	tp := sdktrace.NewTracerProvider()
	h := New(Options{Manager: m, Auth: auth.New(keys), Events: rec, Tracer: tp.Tracer("test")})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testEnv{m: m, keys: keys, srv: srv}, rec
}

func decodeEvents(t *testing.T, resp *http.Response) AuditEventList {
	t.Helper()
	var list AuditEventList
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list
}

func TestEventsTraceparentAndFilters(t *testing.T) {
	env, rec := newEventsEnv(t)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("DELETE", env.srv.URL+"/v1/sandboxes/sb1/files?path=/x", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := env.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if tp := resp.Header.Get("traceparent"); !strings.Contains(tp, traceID) {
		t.Errorf("response traceparent %q does not continue the caller's trace", tp)
	}
	ctx := context.Background()
	t0 := time.Now()
	rec.Add(ctx, recorder.Entry{SandboxID: "sb1", Type: recorder.TypeExec, Time: t0, Data: recorder.ExecData{ExecID: "e1", Phase: "start", Argv: []string{"ls"}, EnvKeys: []string{"K"}}},
		recorder.Entry{SandboxID: "sb1", Type: recorder.TypeFile, Time: t0.Add(time.Second), Data: recorder.FileData{Op: "created", Path: "/a", Source: "guest"}},
		recorder.Entry{SandboxID: "sb1", Type: recorder.TypeNetwork, Time: t0.Add(2 * time.Second), Data: recorder.NetworkData{Kind: "http", Host: "a.test", Allowed: true}})

	all := decodeEvents(t, env.do(t, "GET", "/v1/sandboxes/sb1/events", nil))
	if len(all.Events) != 4 || all.Events[0].Type != AuditEventTypeAPI || all.NextAfter != all.Events[3].ID {
		t.Fatalf("all events: %+v", all)
	}
	api := all.Events[0]
	if api.TraceID == nil || *api.TraceID != traceID || api.API == nil || api.API.Method != "DELETE" || api.API.Route != "DELETE /v1/sandboxes/{id}/files" {
		t.Errorf("api event: %+v %+v", api, api.API)
	}
	if x := all.Events[1].Exec; x == nil || x.ExecID != "e1" || len(*x.EnvKeys) != 1 {
		t.Errorf("exec event: %+v", all.Events[1])
	}
	got := decodeEvents(t, env.do(t, "GET", "/v1/sandboxes/sb1/events?type=file,network", nil))
	if len(got.Events) != 2 || got.Events[0].File == nil || got.Events[1].Network == nil || got.Events[1].Network.Host != "a.test" {
		t.Errorf("type=file,network: %+v", got.Events)
	}
	since := t0.Add(500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	until := t0.Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	got = decodeEvents(t, env.do(t, "GET", "/v1/sandboxes/sb1/events?since="+since+"&until="+until, nil))
	if len(got.Events) != 1 || got.Events[0].Type != AuditEventTypeFile {
		t.Errorf("since/until: %+v", got.Events)
	}
	page := decodeEvents(t, env.do(t, "GET", "/v1/sandboxes/sb1/events?limit=2", nil))
	next := decodeEvents(t, env.do(t, "GET", "/v1/sandboxes/sb1/events?limit=2&after="+itoa(page.NextAfter), nil))
	if len(page.Events) != 2 || len(next.Events) != 2 || next.Events[0].ID <= page.NextAfter {
		t.Errorf("pages: %d then %d", len(page.Events), len(next.Events))
	}
	for _, bad := range []string{"type=bogus", "limit=0", "since=yesterday", "since=" + until + "&until=" + since} {
		if resp := env.do(t, "GET", "/v1/sandboxes/sb1/events?"+bad, nil); resp.StatusCode != 400 {
			t.Errorf("%s: status %d, want 400", bad, resp.StatusCode)
		}
	}
	if resp := env.do(t, "GET", "/v1/sandboxes/nope/events", nil); resp.StatusCode != 404 {
		t.Errorf("unknown sandbox: %d, want 404", resp.StatusCode)
	}
	resp = env.do(t, "GET", "/v1/sandboxes/sb1/events?format=jsonl", nil)
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("jsonl content type %q", ct)
	}
	if n := countLines(t, resp); n != 4 {
		t.Errorf("jsonl export: %d lines, want 4", n)
	}
}

func TestEventsFollowEndsAtDeletion(t *testing.T) {
	env, rec := newEventsEnv(t)
	ctx := context.Background()
	rec.Record(ctx, "sb1", recorder.TypeLifecycle, recorder.LifecycleData{Action: "state", State: "running"})
	resp := env.do(t, "GET", "/v1/sandboxes/sb1/events?follow=true&type=lifecycle", nil)
	sc := bufio.NewScanner(resp.Body)
	next := func() AuditEvent {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e := next(); e.Lifecycle == nil || *e.Lifecycle.State != SandboxStateRunning {
		t.Errorf("first: %+v", e)
	}
	rec.Record(ctx, "sb1", recorder.TypeFile, recorder.FileData{Op: "created", Path: "/skipped-by-filter"})
	rec.Record(ctx, "sb1", recorder.TypeLifecycle, recorder.LifecycleData{Action: "state", State: "paused"})
	if e := next(); *e.Lifecycle.State != SandboxStatePaused {
		t.Errorf("second: %+v", e)
	}
	rec.Record(ctx, "sb1", recorder.TypeLifecycle, recorder.LifecycleData{Action: "state", State: "deleted"})
	if e := next(); *e.Lifecycle.State != SandboxStateDeleted {
		t.Errorf("third: %+v", e)
	}
	if sc.Scan() {
		t.Errorf("stream went on after the deletion: %s", sc.Text())
	}
	// A follow whose filter hides the deletion ends when the sandbox is gone.
	resp = env.do(t, "GET", "/v1/sandboxes/sb1/events?follow=true&type=exec", nil)
	done := make(chan int)
	go func() { done <- countLines(t, resp) }()
	if err := env.m.Delete(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	rec.Record(ctx, "sb1", recorder.TypeLifecycle, recorder.LifecycleData{Action: "state", State: "deleted"})
	select {
	case n := <-done:
		if n != 0 {
			t.Errorf("exec-only follow: %d lines, want 0", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a follow filtered to exec did not end after the deletion")
	}
	// The log outlives the sandbox.
	if got := decodeEvents(t, env.do(t, "GET", "/v1/sandboxes/sb1/events", nil)); len(got.Events) != 5 {
		t.Errorf("after delete: %d events, want 5", len(got.Events))
	}
}

func countLines(t *testing.T, resp *http.Response) int {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		n++
	}
	return n
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
