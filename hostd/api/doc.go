// Package api is hostd's HTTP API. The document openapi.yaml is the source of
// truth: api.gen.go (the ServerInterface and its net/http ServeMux routing)
// is generated from it, and the handlers in this package implement the
// generated ServerInterface. The models are generated once, into package
// apitypes, which the Go client in /client shares; types.gen.go aliases
// them here, so this package names them unqualified.
//
// Handlers reach sandboxes only through the Manager interface, and sandbox
// and guest file errors are turned into HTTP statuses in one place
// (errorFor in errors.go).
package api

//go:generate go tool oapi-codegen -config oapi-codegen.yaml openapi.yaml
//go:generate go run ../../internal/tools/undoc api.gen.go
//go:generate go run ../../internal/tools/aliases -pkg api -import github.com/agentbox/agentbox/apitypes -o types.gen.go ../../apitypes
