// Package agentv1 is the generated host ↔ guest protocol (see agent.proto,
// mount.proto and diff.proto).
package agentv1

//go:generate protoc --go_out=paths=source_relative:. --go-ttrpc_out=paths=source_relative:. -I . agent.proto
//go:generate protoc --go_out=paths=source_relative:. --go-ttrpc_out=paths=source_relative:. -I . mount.proto
//go:generate protoc --go_out=paths=source_relative:. --go-ttrpc_out=paths=source_relative:. -I . diff.proto
//go:generate go run ../../../internal/tools/undoc agent.pb.go agent_ttrpc.pb.go mount.pb.go mount_ttrpc.pb.go diff.pb.go diff_ttrpc.pb.go
