package recorder

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/hostd/store"
)

// Propagator reads and writes W3C traceparent/tracestate headers.
var Propagator = propagation.TraceContext{}

// NewTracerProvider returns hostd's tracer provider. Without an endpoint it
// only makes ids (every request gets a span, so every event a trace id, and
// a caller's traceparent is continued); with one it also sends the spans
// there over OTLP/HTTP (endpoint: "host:port" or an http(s) URL).
func NewTracerProvider(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	res := resource.NewSchemaless(semconv.ServiceName("agentbox-hostd"))
	if endpoint == "" {
		return sdktrace.NewTracerProvider(sdktrace.WithResource(res)), nil
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure()}
	if u, ok := endpointURL(endpoint); ok {
		opts = []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u)}
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("recorder: otlp exporter for %s: %w", endpoint, err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second))), nil
}

// endpointURL reports whether endpoint is a URL (as opposed to host:port),
// and gives a URL without a path the standard one, /v1/traces.
func endpointURL(endpoint string) (string, bool) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", false
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), true
}

// export sends each caused event as a span under its cause's span: an
// exec's end spans the whole command, the others are instants.
func (r *Recorder) export(entries []Entry, evs []store.Event) {
	if r.opts.Tracer == nil {
		return
	}
	for i, e := range entries {
		if !e.Cause.Span.IsValid() {
			continue
		}
		start := e.Start
		if start.IsZero() {
			start = e.Time
		}
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), e.Cause.Span)
		attrs := append([]attribute.KeyValue{
			attribute.String("agentbox.sandbox_id", e.SandboxID),
			attribute.Int64("agentbox.event_id", evs[i].ID),
		}, dataAttributes(e.Type, evs[i].Data)...)
		_, span := r.opts.Tracer.Start(ctx, "agentbox."+e.Type, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(e.Time))
	}
}

// dataAttributes flattens a payload's top-level scalars and string lists
// into span attributes named agentbox.<type>.<field>.
func dataAttributes(typ string, data []byte) []attribute.KeyValue {
	var m map[string]any
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	var out []attribute.KeyValue
	for k, v := range m {
		name := "agentbox." + typ + "." + k
		switch v := v.(type) {
		case string:
			out = append(out, attribute.String(name, v))
		case bool:
			out = append(out, attribute.Bool(name, v))
		case float64:
			out = append(out, attribute.Float64(name, v))
		case []any:
			if ss, ok := stringSlice(v); ok {
				out = append(out, attribute.StringSlice(name, ss))
			}
		}
	}
	return out
}

func stringSlice(v []any) ([]string, bool) {
	out := make([]string, 0, len(v))
	for _, x := range v {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}
