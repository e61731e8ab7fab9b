// Command fleetsim is the fleet's placement simulation against a real
// PostgreSQL (issue 39): simulated hosts (rows registered and heartbeating
// through fleet/store; no VMs) and sandboxes placed by concurrent placers
// with fleet/placement's rule and store.Reserve + Commit, as the gateway's
// replicas place them. Then some hosts stop heartbeating at once, the
// leader's expiry (store.ExpireLeases) runs, and SQL checks that no
// sandbox lives on a dead host unmarked or is owned twice. It prints one
// table. `make fleet-sim` runs it at 100 hosts and 10,000 sandboxes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"

	"github.com/agentbox/agentbox/internal/pgserver"
)

func main() {
	c := Config{}
	flag.StringVar(&c.DSN, "dsn", "", "PostgreSQL to use, a fresh database (empty: start one on a temp dir)")
	flag.IntVar(&c.Hosts, "hosts", 100, "simulated hosts")
	flag.IntVar(&c.Sandboxes, "sandboxes", 10000, "sandboxes to place")
	flag.IntVar(&c.Placers, "placers", 8, "concurrent placers (control-plane replicas' placing loops)")
	flag.IntVar(&c.K, "k", 3, "placement's best of K")
	flag.DurationVar(&c.TTL, "lease-ttl", 10*time.Second, "hosts' lease TTL")
	flag.IntVar(&c.Die, "die", 10, "hosts that stop heartbeating at once")
	flag.IntVar(&c.Projects, "projects", 10, "projects the sandboxes belong to")
	flag.IntVar(&c.ForkEvery, "fork-every", 10, "every Nth placement is a fork of an earlier sandbox (0: none)")
	flag.DurationVar(&c.CacheFor, "cache-for", 250*time.Millisecond, "how long a placer uses its copy of the hosts' rows")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	c.Seed = *seed
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c Config) error {
	if c.DSN == "" {
		pg, err := pgserver.Start(ctx, pgserver.Options{})
		if err != nil {
			return err
		}
		defer pg.Remove()
		c.DSN = pg.DSN("")
	}
	c.ProgressFn = func(n int) { fmt.Fprintf(os.Stderr, "\rplaced %d/%d", n, c.Sandboxes) }
	fmt.Fprintf(os.Stderr, "fleetsim: %d hosts, %d sandboxes, %d placers, K=%d, lease TTL %s\n", c.Hosts, c.Sandboxes, c.Placers, c.K, c.TTL)
	rep, err := Run(ctx, c)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	rep.Print(os.Stdout, c)
	if bad := rep.Failed(c); bad != "" {
		return fmt.Errorf("%s", bad)
	}
	return nil
}

// Failed names the first broken invariant or missed goal ("" if none;
// the rate is reported, not failed on: it depends on the machine).
func (r Report) Failed(c Config) string {
	for _, ch := range r.Checks {
		if ch.Got != 0 {
			return fmt.Sprintf("check failed: %s: %d row(s)", ch.Name, ch.Got)
		}
	}
	switch {
	case r.Lost != r.LostExpected:
		return fmt.Sprintf("%d sandboxes were on the dead hosts, %d marked lost", r.LostExpected, r.Lost)
	case r.FalseExpiries > 0:
		return fmt.Sprintf("%d live hosts' leases were expired", r.FalseExpiries)
	case r.MarkedAfter > 2*c.TTL:
		return fmt.Sprintf("dead hosts marked after %s, more than two lease periods", r.MarkedAfter)
	}
	return ""
}

// Print writes the report as a table.
func (r Report) Print(w io.Writer, c Config) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v, goal string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", k, v, goal) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	row("figure", "value", "goal")
	row("hosts (simulated, heartbeating)", fmt.Sprint(r.Hosts), "")
	row("placers (concurrent)", fmt.Sprint(c.Placers), "")
	row("sandboxes placed", fmt.Sprintf("%d of %d (%d found no room)", r.Placed, c.Sandboxes, r.NoRoom), "")
	row("forks on their parent's host", fmt.Sprintf("%d of %d", r.ForksOnParent, r.Forks), "")
	row("placement rate", fmt.Sprintf("%.0f /s", r.Rate()), ">= 500 /s")
	row("placement latency p50", ms(r.P50), "")
	row("placement latency p99", ms(r.P99), "")
	row("placement latency max", ms(r.Max), "")
	row("hosts stopped heartbeating", fmt.Sprint(r.Died), "")
	row("their sandboxes marked lost", fmt.Sprintf("%d of %d", r.Lost, r.LostExpected), "all")
	row("marked after (last heartbeat stop to lost)", r.MarkedAfter.Round(time.Millisecond).String(), fmt.Sprintf("<= %s (2 leases)", 2*c.TTL))
	row("live hosts wrongly expired", fmt.Sprint(r.FalseExpiries), "0")
	for _, ch := range r.Checks {
		row("SQL: "+ch.Name, fmt.Sprint(ch.Got), "0")
	}
	tw.Flush()
}
