package apitypes

import "time"

// Host is one host of a fleet, as the control plane's GET /v1/hosts shows
// it (an operator's endpoint of the fleet; hostd alone has none).
type Host struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"` // live, dead or refused
	Admin string `json:"admin"` // active, cordoned or draining
	// Reason says why a host is dead or refused.
	Reason     string    `json:"reason,omitempty"`
	Epoch      int64     `json:"epoch"`
	LeaseUntil time.Time `json:"lease_until"`
	Heartbeat  time.Time `json:"heartbeat_at"`
	// MemoryMiB and VCPUs are what the host admits in all; Used* what the
	// fleet has placed there.
	MemoryMiB     int64    `json:"memory_mib"`
	VCPUs         int64    `json:"vcpus"`
	UsedMemoryMiB int64    `json:"used_memory_mib"`
	UsedVCPUs     int64    `json:"used_vcpus"`
	Sandboxes     int      `json:"sandboxes"`
	MaxSandboxes  int      `json:"max_sandboxes"`
	Running       int      `json:"running"`
	Templates     []string `json:"templates"`
	Warm          []string `json:"warm"`
	// TokenAccepted is false for a host whose token is not the fleet's.
	TokenAccepted bool `json:"token_accepted"`
}

// HostList is GET /v1/hosts's answer.
type HostList struct {
	Hosts []Host `json:"hosts"`
}

// HostDrain is POST /v1/hosts/{name}/drain's answer when the fleet's
// snapshots are portable: the host (draining) after its sandboxes moved
// off it, how many moved, and those that did not, with why (the answer
// is then 409).
type HostDrain struct {
	Host
	Moved  int               `json:"moved"`
	Failed map[string]string `json:"failed,omitempty"`
}
