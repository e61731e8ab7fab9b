package fleettest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/internal/pgserver"
)

// TestNamespacesReachPostgresOverTheBridge builds the plumbing alone:
// each host namespace has its own address and reaches PostgreSQL on the
// bridge; removing it leaves no namespace, link or bridge.
func TestNamespacesReachPostgresOverTheBridge(t *testing.T) {
	if why := missing(); why != "" {
		t.Skip(why)
	}
	ctx := context.Background()
	n, err := newNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const hosts = 2
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = n.remove(ctx, hosts)
		}
	})
	pg, err := pgserver.Start(ctx, pgserver.Options{Listen: "127.0.0.1," + n.gatewayIP(), TrustNet: n.cidr()})
	if errors.Is(err, pgserver.ErrNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Remove)
	f := &Fleet{net: n, pg: pg}
	for i := range hosts {
		if err := n.addHost(ctx, i); err != nil {
			t.Fatal(err)
		}
		var addr string
		err := netns.Do(n.netns(i), func() error {
			c, err := pgx.Connect(ctx, f.HostDSN())
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			return c.QueryRow(ctx, `SELECT host(inet_client_addr())`).Scan(&addr)
		})
		if err != nil {
			t.Fatalf("host %d: postgres from its namespace: %v", i, err)
		}
		if addr != n.hostIP(i) {
			t.Fatalf("host %d connected from %s, want its own address %s", i, addr, n.hostIP(i))
		}
	}
	if err := n.remove(ctx, hosts); err != nil {
		t.Fatal(err)
	}
	removed = true
	for i := range hosts {
		if _, err := os.Stat("/run/netns/" + n.netns(i)); err == nil {
			t.Errorf("namespace %s left", n.netns(i))
		}
	}
	if exec.Command("ip", "link", "show", n.bridge).Run() == nil {
		t.Errorf("bridge %s left", n.bridge)
	}
}
