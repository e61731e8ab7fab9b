// Package fleete2e holds the fleet's end-to-end tests (tag vm): a real
// PostgreSQL, three hostds in network namespaces of their own and two
// control-plane replicas (internal/fleettest), driven through the Go
// client as a user would.
package fleete2e
