package egress

import "time"

// Event kinds.
const (
	KindDNS   = "dns"   // one query
	KindHTTP  = "http"  // one plain HTTP request
	KindHTTPS = "https" // one request of an intercepted TLS connection
	KindTLS   = "tls"   // one TLS connection spliced by SNI (not decrypted)
	KindTCP   = "tcp"   // one connection allowed by CIDR, or refused
)

// Event is one audited network action of a sandbox.
type Event struct {
	SandboxID string
	Time      time.Time
	Kind      string
	Host      string
	Port      int
	// Method and Path are set for HTTP requests.
	Method string
	Path   string
	// BytesOut went from the guest to the upstream, BytesIn came back.
	BytesOut int64
	BytesIn  int64
	Allowed  bool
	// Rule is the policy entry that allowed it ("domain:*.github.com",
	// "cidr:10.0.0.0/8", "inject:api.github.com"), or why it was denied.
	Rule string
	// Status is the HTTP status returned to the guest, if any.
	Status int
}

// Recorder stores audit events. Record must not block for long.
type Recorder interface {
	RecordNetworkEvent(ev Event)
}

// RecorderFunc adapts a function to Recorder.
type RecorderFunc func(Event)

// RecordNetworkEvent calls f.
func (f RecorderFunc) RecordNetworkEvent(ev Event) { f(ev) }
