package recorder

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentbox/agentbox/hostd/store"
)

// otlpSink is an OTLP/HTTP trace receiver on loopback.
type otlpSink struct {
	mu    sync.Mutex
	spans map[string]string // span name → trace id
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s.spans[sp.Name] = hex.EncodeToString(sp.TraceId)
			}
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Write(b)
}

func TestEventsExportAsOTLPSpans(t *testing.T) {
	sink := &otlpSink{spans: map[string]string{}}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	ctx := context.Background()
	tp, err := NewTracerProvider(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(ctx)
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := New(Options{Store: st, Tracer: tp.Tracer("test")})

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	caller := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	start := time.Now().Add(-time.Second)
	r.Add(caller, Entry{SandboxID: "sb", Type: TypeExec, Cause: r.CauseOf(caller), Start: start, Data: ExecData{ExecID: "e", Phase: PhaseEnd, Argv: []string{"ls"}}})
	r.Record(caller, "sb", TypePackage, PackageData{Manager: "pip", Action: "installed", Name: "demo", Version: "0.1"})
	r.Record(ctx, "sb", TypeLifecycle, LifecycleData{Action: ActionState, State: "running"}) // no cause: no span
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, name := range []string{"agentbox.exec", "agentbox.package"} {
		if got := sink.spans[name]; got != tid.String() {
			t.Errorf("span %s: trace %q, want %s (spans: %v)", name, got, tid, sink.spans)
		}
	}
	if _, ok := sink.spans["agentbox.lifecycle"]; ok {
		t.Error("an event without a cause was exported")
	}
	evs, err := st.ListEvents(ctx, store.EventQuery{SandboxID: "sb"})
	if err != nil || len(evs) != 3 || evs[0].TraceID != tid.String() || evs[0].SpanID != sid.String() || evs[2].TraceID != "" {
		t.Errorf("stored: %+v, %v", evs, err)
	}
}
