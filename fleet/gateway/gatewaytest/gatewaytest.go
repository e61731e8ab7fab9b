// Package gatewaytest puts the fleet's control plane in front of test
// hosts: a real PostgreSQL (internal/pgserver), the hosts registered in it,
// and a gateway replica serving in this process. The SDK, CLI and MCP
// suites run through it once, as against a fleet of one host.
package gatewaytest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/agentbox/agentbox/fleet/gateway"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/fleet/store/storetest"
	"github.com/agentbox/agentbox/internal/pgserver"
)

// Secret is the test fleet's secret.
var Secret = []byte("the test fleet's secret, not a real one")

// AdminKey is the admin key the test gateway accepts.
const AdminKey = "ab_gatewaytest-admin"

// Token is the API key a test hostd named name must accept (its
// hostd.Config.APIKey): the token the gateway calls it with.
func Token(name string) string { return hosttoken.Token(Secret, name) }

// Fleet is a test fleet's database and the gateways in front of it.
type Fleet struct {
	PG    *pgserver.Server
	Store *store.Store
}

// Start starts PostgreSQL for the test (skipping it where none is
// installed) and opens the fleet's store on it.
func Start(t testing.TB) *Fleet {
	t.Helper()
	st, pg := storetest.Open(t)
	return &Fleet{PG: pg, Store: st}
}

// AddHost registers a host (a hostd accepting Token(name)) at url.
func (f *Fleet) AddHost(t testing.TB, name, url string, c store.Capacity) {
	t.Helper()
	if c.MemMiB == 0 {
		c = store.Capacity{MemMiB: 64 << 10, VCPUs: 256}
	}
	if _, _, err := f.Store.Register(context.Background(), store.Registration{Name: name, Addr: url,
		TokenHash: hosttoken.Hash(Token(name)), TTL: time.Hour, Capacity: c}); err != nil {
		t.Fatal(err)
	}
}

// Gateway serves a gateway replica until the test ends and returns its URL
// (AdminKey is its admin).
func (f *Fleet) Gateway(t testing.TB, tweak ...func(*gateway.Config)) string {
	t.Helper()
	cfg := gateway.Config{Store: f.Store, Secret: Secret, SecretsKey: []byte("the test fleet's sealing key"),
		CallTimeout: time.Second, LeaseTTL: 2 * time.Second}
	for _, tw := range tweak {
		tw(&cfg)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bootstrap(context.Background(), AdminKey); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + l.Addr().String()
}

// Front starts a fleet of the one host at url and one gateway in front of
// it, and returns the gateway's URL.
func Front(t testing.TB, name, url string) string {
	t.Helper()
	f := Start(t)
	f.AddHost(t, name, url, store.Capacity{})
	return f.Gateway(t)
}
