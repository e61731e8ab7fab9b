package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/fleet/store/storetest"
)

// TestSimulationSmall runs the simulation at a small scale against a real
// PostgreSQL: every sandbox placed, the dead hosts' sandboxes all lost
// within two lease periods, every invariant's query clean.
func TestSimulationSmall(t *testing.T) {
	ctx := context.Background()
	pg := storetest.Server(t)
	c := Config{DSN: pg.DSN(""), Hosts: 10, Sandboxes: 500, Placers: 4, K: 3, TTL: 2 * time.Second, Die: 2,
		Projects: 3, ForkEvery: 10, CacheFor: 100 * time.Millisecond, Seed: 7}
	rep, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b, c)
	t.Logf("\n%s", b.String())
	if rep.Placed != c.Sandboxes || rep.NoRoom != 0 {
		t.Errorf("placed %d of %d (%d found no room)", rep.Placed, c.Sandboxes, rep.NoRoom)
	}
	if rep.Died != 2 || rep.LostExpected == 0 {
		t.Errorf("%d hosts died holding %d sandboxes", rep.Died, rep.LostExpected)
	}
	if rep.Forks == 0 || rep.ForksOnParent != rep.Forks {
		t.Errorf("%d of %d forks on their parent's host", rep.ForksOnParent, rep.Forks)
	}
	if bad := rep.Failed(c); bad != "" {
		t.Error(bad)
	}
}
