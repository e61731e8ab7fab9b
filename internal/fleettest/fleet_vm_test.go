//go:build vm

package fleettest_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/internal/fleettest"
	"github.com/agentbox/agentbox/internal/waitfor"
)

// needFleetBinaries skips t until the built hostd has fleet mode and the
// agentbox CLI the gateway.
func needFleetBinaries(t *testing.T) {
	t.Helper()
	bin, err := fleettest.Binaries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(filepath.Join(bin, "hostd"), "--help").CombinedOutput()
	if !strings.Contains(string(out), "--fleet-db") {
		t.Skip("hostd has no --fleet-db yet (hostd/fleetagent)")
	}
	out, _ = exec.Command(filepath.Join(bin, "agentbox"), "gateway", "--help").CombinedOutput()
	if !strings.Contains(string(out), "--fleet-db") {
		t.Skip("agentbox has no gateway yet (fleet/gateway)")
	}
}

// TestFleetSmoke starts three fleet-mode hosts and two gateways: the hosts
// register, a sandbox made through one replica runs commands through the
// other, and a host killed with its VMMs loses its sandboxes and comes
// back in a new epoch.
func TestFleetSmoke(t *testing.T) {
	needFleetBinaries(t)
	f := fleettest.New(t, fleettest.Options{Hosts: 3, Gateways: 2, Fleet: true, LeaseTTL: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, f.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	live := func() int {
		hs, _ := st.Hosts(ctx)
		n := 0
		for _, h := range hs {
			if h.Placeable(time.Now()) {
				n++
			}
		}
		return n
	}
	waitfor.Cond(t, "three live hosts", func() bool { return live() == 3 })
	a, err := client.New(f.GatewayURL(0), f.AdminKey())
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.New(f.GatewayURL(1), f.AdminKey())
	if err != nil {
		t.Fatal(err)
	}
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "through-b"}}); err != nil || r.Stdout != "through-b\n" {
		t.Fatalf("exec through replica B: %+v %v", r, err)
	}
	row, err := st.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	i := -1
	for k := range f.Hosts() {
		if f.HostName(k) == row.Host {
			i = k
		}
	}
	if i < 0 {
		t.Fatalf("sandbox on %q, not one of the fleet's hosts", row.Host)
	}
	if err := f.KillHost(i); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the killed host's sandbox lost", func() bool {
		r, err := st.Get(ctx, sb.ID)
		return err == nil && r.State == store.StateLost
	})
	if err := f.StartHost(ctx, i); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the host back in a new epoch", func() bool {
		h, err := st.GetHost(ctx, row.Host)
		return err == nil && h.Placeable(time.Now()) && h.Epoch > row.HostEpoch
	})
}
