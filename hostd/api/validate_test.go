package api

import (
	"bytes"
	"encoding/json"
	"math/big"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

func TestSpecLoads(t *testing.T) {
	doc, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
}

// numericField is an integer or number in a request: a path or query
// parameter, or a field of a JSON body at path (property names, "[]" for
// an array's items).
type numericField struct {
	method, path string // the operation
	in           string // "path", "query" or "body"
	name         string // the parameter, or the body field's last property
	body         []string
	schema       *openapi3.Schema
}

func (f numericField) String() string {
	if f.in == "body" {
		return f.method + " " + f.path + " body " + strings.Join(f.body, ".")
	}
	return f.method + " " + f.path + " " + f.in + " " + f.name
}

// requestNumbers walks every operation's parameters and JSON body.
func requestNumbers(t *testing.T, doc *openapi3.T) []numericField {
	var out []numericField
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, path := range paths {
		item := doc.Paths.Find(path)
		for method, op := range item.Operations() {
			params := append(openapi3.Parameters{}, item.Parameters...)
			for _, p := range append(params, op.Parameters...) {
				if s := p.Value.Schema.Value; isNumeric(s) {
					out = append(out, numericField{method: method, path: path, in: p.Value.In, name: p.Value.Name, schema: s})
				}
			}
			if body := jsonBody(op); body != nil {
				walkNumbers(body.Content.Get("application/json").Schema.Value, nil, func(at []string, s *openapi3.Schema) {
					out = append(out, numericField{method: method, path: path, in: "body", name: lastName(at), body: at, schema: s})
				})
			}
		}
	}
	return out
}

func isNumeric(s *openapi3.Schema) bool {
	return s.Type.Is(openapi3.TypeInteger) || s.Type.Is(openapi3.TypeNumber)
}

func walkNumbers(s *openapi3.Schema, at []string, visit func([]string, *openapi3.Schema)) {
	switch {
	case isNumeric(s):
		visit(at, s)
	case s.Type.Is(openapi3.TypeArray):
		walkNumbers(s.Items.Value, append(at[:len(at):len(at)], "[]"), visit)
	case s.Type.Is(openapi3.TypeObject):
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			walkNumbers(s.Properties[n].Value, append(at[:len(at):len(at)], n), visit)
		}
		if ap := s.AdditionalProperties.Schema; ap != nil {
			walkNumbers(ap.Value, append(at[:len(at):len(at)], "*"), visit)
		}
	}
}

func lastName(at []string) string {
	for i := len(at) - 1; i >= 0; i-- {
		if at[i] != "[]" && at[i] != "*" {
			return at[i]
		}
	}
	return ""
}

// sample is a small valid value of s: what a request's required fields
// hold while the test sets the one it probes.
func sample(s *openapi3.Schema) any {
	switch {
	case len(s.Enum) > 0:
		for _, v := range s.Enum {
			if v != "" {
				return v
			}
		}
		return s.Enum[0]
	case isNumeric(s):
		if s.Min != nil {
			return *s.Min
		}
		return 0
	case s.Type.Is(openapi3.TypeBoolean):
		return false
	case s.Type.Is(openapi3.TypeArray):
		if s.MinItems > 0 {
			return []any{sample(s.Items.Value)}
		}
		return []any{}
	case s.Type.Is(openapi3.TypeObject):
		obj := map[string]any{}
		for _, n := range s.Required {
			obj[n] = sample(s.Properties[n].Value)
		}
		return obj
	}
	return "x"
}

// withValue is a sample of s with v at the path at.
func withValue(s *openapi3.Schema, at []string, v any) any {
	if len(at) == 0 {
		return v
	}
	switch at[0] {
	case "[]":
		return []any{withValue(s.Items.Value, at[1:], v)}
	case "*":
		return map[string]any{"k": withValue(s.AdditionalProperties.Schema.Value, at[1:], v)}
	}
	obj := sample(s).(map[string]any)
	obj[at[0]] = withValue(s.Properties[at[0]].Value, at[1:], v)
	return obj
}

// justAbove is the least integer above max, spelled in JSON.
func justAbove(max float64) json.RawMessage {
	n, _ := new(big.Float).SetFloat64(max).Int(nil)
	return json.RawMessage(n.Add(n, big.NewInt(1)).String())
}

// pathValues fill the path parameters that a probe does not set.
var pathValues = map[string]string{"id": "sb1", "exec_id": "e1", "port": "80", "snapshot_id": "sn1", "name": "py"}

// TestRequestNumbersBounded: every integer and number that a request
// carries has a minimum and a maximum in the document, and a value just
// above the maximum is a 400 naming the field, before any handler runs
// (time.Duration(s) * time.Second wrapped, and exec_timeout_s
// 18446744074 became 0.48 s).
func TestRequestNumbersBounded(t *testing.T) {
	doc, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	fields := requestNumbers(t, doc)
	if len(fields) < 20 {
		t.Fatalf("found %d numeric request fields, want the document's 20 or more", len(fields))
	}
	e := newTestEnv(t)
	for _, f := range fields {
		t.Run(f.String(), func(t *testing.T) {
			if f.schema.Min == nil || f.schema.Max == nil {
				t.Fatalf("no minimum or maximum: every number a request gives needs both")
			}
			above := justAbove(*f.schema.Max)
			target, q := f.path, url.Values{}
			var body []byte
			op := doc.Paths.Find(f.path).GetOperation(f.method)
			for _, p := range append(append(openapi3.Parameters{}, doc.Paths.Find(f.path).Parameters...), op.Parameters...) {
				switch {
				case p.Value.In == "path" && p.Value.Name == f.name && f.in == "path":
					target = strings.ReplaceAll(target, "{"+p.Value.Name+"}", string(above))
				case p.Value.In == "path":
					target = strings.ReplaceAll(target, "{"+p.Value.Name+"}", pathValues[p.Value.Name])
				case p.Value.In == "query" && p.Value.Name == f.name && f.in == "query":
					q.Set(p.Value.Name, string(above))
				case p.Value.In == "query" && p.Value.Required && p.Value.Schema.Value.Pattern != "":
					q.Set(p.Value.Name, "x") // a name
				case p.Value.In == "query" && p.Value.Required:
					q.Set(p.Value.Name, "/x")
				}
			}
			if rb := jsonBody(op); rb != nil {
				s := rb.Content.Get("application/json").Schema.Value
				v := sample(s)
				if f.in == "body" {
					v = withValue(s, f.body, above)
				}
				if body, err = json.Marshal(v); err != nil {
					t.Fatal(err)
				}
			}
			if len(q) > 0 {
				target += "?" + q.Encode()
			}
			resp := e.do(t, f.method, target, bytes.NewReader(body))
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%s at %s (%s): got %d, want 400", f.name, above, body, resp.StatusCode)
			}
			if got := errorOf(t, resp); !strings.Contains(got.Message, f.name) {
				t.Errorf("message %q does not name %s", got.Message, f.name)
			}
		})
	}
}

// TestSecondsMatchSpec: the handlers' bounds on seconds are the
// document's maxima.
func TestSecondsMatchSpec(t *testing.T) {
	doc, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		schema, field string
		max           int
	}{
		{"CreateSandboxRequest", "timeout_s", maxLifetimeS},
		{"CreateSandboxRequest", "exec_timeout_s", maxWaitS},
		{"CreateSandboxRequest", "idle_timeout_s", maxWaitS},
		{"TimeoutRequest", "timeout_s", maxLifetimeS},
		{"ExecRequest", "timeout_s", maxWaitS},
		{"ShareLinkRequest", "expires_in_s", maxShareS},
	}
	for _, tc := range tests {
		s := doc.Components.Schemas[tc.schema].Value.Properties[tc.field].Value
		if s.Max == nil || int(*s.Max) != tc.max {
			t.Errorf("%s.%s maximum: got %v, want %d", tc.schema, tc.field, s.Max, tc.max)
		}
	}
}

// TestSecondsOverflow: the probe's values, which wrapped in
// time.Duration, are refused by seconds itself (the validator refuses
// them first over HTTP).
func TestSecondsOverflow(t *testing.T) {
	for _, n := range []int{18446744074, 9223372036854775807, -1, maxWaitS + 1} {
		if d, err := seconds("exec_timeout_s", n, maxWaitS); err == nil {
			t.Errorf("seconds(%d): got %v, want an error", n, d)
		}
	}
	if d, err := seconds("exec_timeout_s", maxWaitS, maxWaitS); err != nil || d != maxWaitS*1e9 {
		t.Errorf("seconds(max): got %v, %v, want 720h", d, err)
	}
	e := newTestEnv(t)
	for _, tc := range []struct{ target, body string }{
		{"/v1/sandboxes", `{"exec_timeout_s":18446744074}`},
		{"/v1/sandboxes", `{"idle_timeout_s":18446744074}`},
		{"/v1/sandboxes/sb1/exec", `{"cmd":["true"],"timeout_s":9223372036854775807}`},
		{"/v1/sandboxes/sb1/ports/80/links", `{"expires_in_s":9223372036854775807}`},
	} {
		wantError(t, e.do(t, "POST", tc.target, strings.NewReader(tc.body)), 400, CodeInvalidRequest)
	}
	if n := len(e.m.Calls()); n != 0 {
		t.Errorf("manager calls: got %d, want none", n)
	}
}
