// Command fleet starts a fleet on this machine for a person to try (issue
// 39; `make fleet`): PostgreSQL, three hostds each in a network namespace
// of its own, and two control-plane replicas (`agentbox gateway`), with
// internal/fleettest. It prints the environment that points the CLI and
// the SDKs at the fleet, and the hosts, then runs until Ctrl-C (or
// SIGTERM) and removes everything it started. It needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentbox/agentbox/internal/fleettest"
)

func main() {
	o := fleettest.Options{}
	flag.IntVar(&o.Hosts, "hosts", 3, "hostds, each in a network namespace of its own")
	flag.IntVar(&o.Gateways, "gateways", 2, "control-plane replicas")
	flag.BoolVar(&o.Fleet, "fleet", true, "run the hostds in fleet mode (false: independent hostds, which no gateway reaches)")
	flag.DurationVar(&o.LeaseTTL, "lease-ttl", 10*time.Second, "hosts' lease TTL")
	flag.IntVar(&o.MaxSandboxes, "max-sandboxes", 0, "sandboxes per host (0: no cap)")
	flag.StringVar(&o.Dir, "dir", "", "directory for the fleet's data and logs (default: a temporary one, removed at exit)")
	bin := flag.String("bin", "", "directory of built hostd and agentbox (default: build them from this checkout)")
	flag.Parse()
	if *bin != "" {
		abs, err := filepath.Abs(*bin)
		if err != nil {
			fail(err)
		}
		os.Setenv(fleettest.BinEnv, abs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	f, err := fleettest.Start(startCtx, o)
	cancel()
	if err != nil {
		fail(err)
	}
	defer fleettest.RemoveBinaries()
	describe(os.Stdout, f, o)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "fleet: stopping (the hostds drain their sandboxes)")
	if err := f.Close(); err != nil {
		fail(err)
	}
	fmt.Fprintln(os.Stderr, "fleet: everything removed")
}

// describe prints the fleet's environment and members.
func describe(w io.Writer, f *fleettest.Fleet, o fleettest.Options) {
	if o.Gateways > 0 {
		fmt.Fprintf(w, "export AGENTBOX_URL=%s AGENTBOX_API_KEY=%s\n", f.GatewayURL(0), f.AdminKey())
	} else {
		fmt.Fprintf(w, "export AGENTBOX_URL=%s AGENTBOX_API_KEY=%s\n", f.HostURL(0), f.HostKey())
	}
	fmt.Fprintf(w, "# database: %s\n", f.DSN())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "# member\taddress\tpid\tnamespace\tlog")
	for j := range o.Gateways {
		fmt.Fprintf(tw, "# gateway-%d\t%s\t%d\t(root)\t%s\n", j, f.GatewayURL(j), f.GatewayPID(j), f.GatewayLog(j))
	}
	for i := range f.Hosts() {
		fmt.Fprintf(tw, "# %s\t%s\t%d\t%s\t%s\n", f.HostName(i), f.HostURL(i), f.HostPID(i), f.HostNetns(i), f.HostLog(i))
	}
	tw.Flush()
	fmt.Fprintln(w, "# Ctrl-C stops the fleet and removes everything it started.")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fleet:", err)
	os.Exit(1)
}
