// Package apitypes holds the types of hostd's HTTP API: its request and
// response bodies, enums and operation parameters. apitypes.gen.go is
// generated from hostd/api/openapi.yaml, once: the server (hostd/api) and
// the Go client (client) are generated without models, and each declares
// aliases of these types (internal/tools/aliases), so both speak the same
// Go types and users keep writing client.CreateSandboxRequest. It imports
// neither of them.
package apitypes

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../hostd/api/openapi.yaml
//go:generate go run ../internal/tools/undoc apitypes.gen.go
