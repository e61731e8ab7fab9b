// Package client is the Go client of hostd's API. client.gen.go (request
// builders and the low-level Raw client) is generated from
// hostd/api/openapi.yaml, the same document the server is generated from;
// the models are generated once, into package apitypes, which the server
// shares, and types.gen.go aliases them here (client.Sandbox is
// apitypes.Sandbox). Client in client.go is the hand-written convenience
// layer on top:
//
//	c, err := client.FromEnv()
//	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
//	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "hi"}})
//
// Errors answered by the API are *APIError values (use errors.As).
package client

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../hostd/api/openapi.yaml
//go:generate go run ../internal/tools/undoc client.gen.go
//go:generate go run ../internal/tools/aliases -pkg client -import github.com/agentbox/agentbox/apitypes -o types.gen.go ../apitypes
