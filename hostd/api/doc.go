// Package api is hostd's HTTP API. The document openapi.yaml is the source of
// truth: api.gen.go (models, the ServerInterface and its net/http ServeMux
// routing) is generated from it, and the handlers in this package implement
// the generated ServerInterface. The Go client in /client is generated from
// the same document.
//
// Handlers reach sandboxes only through the Manager interface, and sandbox
// and guest file errors are turned into HTTP statuses in one place
// (errorFor in errors.go).
package api

//go:generate go tool oapi-codegen -config oapi-codegen.yaml openapi.yaml
//go:generate go run ../../internal/tools/undoc api.gen.go
