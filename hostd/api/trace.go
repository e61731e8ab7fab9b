package api

import (
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/hostd/internal/httpstatus"
	"github.com/agentbox/agentbox/hostd/recorder"
)

// startSpan continues the caller's W3C trace (traceparent) with a server
// span for r, and tells the caller its ids in the response's traceparent.
func (s *server) startSpan(w http.ResponseWriter, r *http.Request) (*http.Request, trace.Span) {
	ctx := recorder.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	if s.tracer == nil {
		return r.WithContext(ctx), nil
	}
	ctx, span := s.tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
	recorder.Propagator.Inject(ctx, propagation.HeaderCarrier(w.Header()))
	return r.WithContext(ctx), span
}

// endRequest ends r's span and records an api event for a request that
// acted on a sandbox (any method but GET and HEAD).
func (s *server) endRequest(r *http.Request, rec *httpstatus.Recorder, start time.Time, span trace.Span) {
	status := rec.Status()
	if span != nil {
		if r.Pattern != "" {
			span.SetName(r.Pattern)
		}
		span.SetAttributes(attribute.String("http.route", r.Pattern), attribute.Int("http.response.status_code", status))
		if id := r.PathValue("id"); id != "" {
			span.SetAttributes(attribute.String("agentbox.sandbox_id", id))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	}
	if s.events == nil || r.Method == http.MethodGet || r.Method == http.MethodHead || status == http.StatusUnauthorized {
		return
	}
	id := r.PathValue("id")
	if id == "" && r.Pattern == "POST /v1/sandboxes" {
		id = strings.TrimPrefix(rec.Header().Get("Location"), "/v1/sandboxes/")
	}
	if id == "" || !strings.Contains(r.Pattern, "/v1/sandboxes") {
		return
	}
	s.events.Record(r.Context(), id, recorder.TypeAPI, recorder.APIData{Method: r.Method, Route: r.Pattern, Path: r.URL.Path,
		Status: status, DurationMS: time.Since(start).Milliseconds()})
}
