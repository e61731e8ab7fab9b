package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// validator checks each request against openapi.yaml before its handler
// runs, so that the document's enums, ranges and patterns are the API's
// and are not typed again by hand. It runs as the generated wrappers'
// middleware: after authentication (router.serve) and after the wrapper
// bound the parameters, so a request without a key is still a 401 and the
// mux has set the route's pattern and path values.
//
// Path and query parameters are validated for every operation. A body is
// validated only where the operation takes JSON: file and archive uploads
// stream their bodies to the guest, unread here. A JSON body that does not
// parse (empty, null, truncated, trailing data) is left to the handler,
// whose decoder says what is wrong with it.
type validator struct {
	doc *openapi3.T
	// routes maps a ServeMux pattern ("POST /v1/sandboxes/{id}/exec") to
	// its operation.
	routes map[string]*routers.Route
	opts   *openapi3filter.Options
}

// loadSpec parses the embedded document.
func loadSpec() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openapiYAML)
	if err != nil {
		return nil, fmt.Errorf("api: openapi.yaml: %w", err)
	}
	return doc, nil
}

func newValidator(doc *openapi3.T) *validator {
	v := &validator{doc: doc, routes: map[string]*routers.Route{}, opts: &openapi3filter.Options{
		// router.serve authenticates; the document's security is not
		// checked again here.
		AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
		SkipSettingDefaults: true,
		ExcludeRequestBody:  true,
	}}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			v.routes[method+" "+path] = &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
		}
	}
	return v
}

// middleware validates r before next serves it.
func (v *validator) middleware(s *server) MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := v.check(w, r); err != nil {
				s.writeError(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// check validates r's parameters and, for a JSON operation, its body; the
// body is read (at most bodyLimit bytes) and put back for the handler.
func (v *validator) check(w http.ResponseWriter, r *http.Request) error {
	route := v.routes[r.Pattern]
	if route == nil {
		return nil // not an operation of the document (none today)
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: map[string]string{}, Route: route, Options: v.opts}
	for _, p := range route.Operation.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInPath {
			in.PathParams[p.Value.Name] = r.PathValue(p.Value.Name)
		}
	}
	for _, p := range route.PathItem.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInPath {
			in.PathParams[p.Value.Name] = r.PathValue(p.Value.Name)
		}
	}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return validationError(err)
	}
	body := jsonBody(route.Operation)
	if body == nil || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bodyLimit(r.Pattern)))
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(data))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: http.StatusRequestEntityTooLarge, code: CodeBadBody, msg: "body too large", err: err}
		}
		return &apiError{status: http.StatusBadRequest, code: CodeBadBody, msg: "reading the body", err: err}
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || string(trimmed) == "null" || !json.Valid(trimmed) {
		return nil // the handler's decoder answers these
	}
	// The document's JSON operations take JSON whatever the Content-Type
	// (clients need not send one), so the body is validated as JSON.
	vr := r.Clone(r.Context())
	vr.Header.Set("Content-Type", "application/json")
	vr.Body = io.NopCloser(bytes.NewReader(data))
	vin := *in
	vin.Request = vr
	if err := openapi3filter.ValidateRequestBody(r.Context(), &vin, body); err != nil {
		return validationError(err)
	}
	return nil
}

// num prints a bound in plain decimal.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// jsonBody is op's request body if it takes JSON.
func jsonBody(op *openapi3.Operation) *openapi3.RequestBody {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil
	}
	if op.RequestBody.Value.Content.Get("application/json") == nil {
		return nil
	}
	return op.RequestBody.Value
}

// bodyLimit is the most of a JSON body that validation reads: the
// handler's own limit (exec's is larger, for its stdin).
func bodyLimit(pattern string) int64 {
	if pattern == "POST /v1/sandboxes/{id}/exec" {
		return maxExecBody
	}
	return maxJSONBody
}

// validationError turns a validation failure into the API's 400, naming
// the parameter or body field: "body: timeout_s: number must be at most
// 2592000". A parameter's failure is invalid_param; a body's is bad_body
// when its shape is wrong (an unknown field, a value of the wrong type) and
// invalid_request when a value is out of its range, enum or pattern.
func validationError(err error) error {
	var re *openapi3filter.RequestError
	if !errors.As(err, &re) {
		return &apiError{status: http.StatusBadRequest, code: CodeInvalidRequest, msg: err.Error()}
	}
	var se *openapi3.SchemaError
	reason, code := re.Reason, CodeInvalidRequest
	if errors.As(err, &se) {
		reason = se.Reason
		switch se.SchemaField {
		case "type", "properties", "additionalProperties": // a wrong type, an unknown field
			code = CodeBadBody
		case "maximum": // kin-openapi prints 2592000 as 2.592e+06
			reason = "must be at most " + num(*se.Schema.Max)
		case "minimum":
			reason = "must be at least " + num(*se.Schema.Min)
		}
		if ptr := se.JSONPointer(); len(ptr) > 0 {
			reason = strings.Join(ptr, ".") + ": " + reason
		}
	} else if re.Err != nil {
		reason = strings.TrimPrefix(reason+": "+re.Err.Error(), ": ")
	}
	if re.Parameter != nil {
		return &apiError{status: http.StatusBadRequest, code: CodeInvalidParam,
			msg: fmt.Sprintf("%s parameter %s: %s", re.Parameter.In, re.Parameter.Name, strings.TrimPrefix(reason, re.Parameter.Name+": "))}
	}
	return &apiError{status: http.StatusBadRequest, code: code, msg: "body: " + reason}
}
