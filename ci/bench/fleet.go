package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/gateway"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/internal/pgserver"
)

// The bench's fleet: its hostd is host fleetHost of a fleet with this
// secret, so a gateway can be put in front of it.
var fleetSecret = []byte("the bench fleet's secret (not a real one)")

const (
	fleetHost     = "bench-host"
	fleetAdminKey = "ab_bench-fleet-admin"
)

// benchFleet measures the control plane's cost: create, exec and a 64 MiB
// read through a gateway (with a real PostgreSQL) against the same calls
// on the same hostd directly, interleaved in one run.
func benchFleet(ctx context.Context, e *env, execs int) error {
	e.p.step("fleet: PostgreSQL and a gateway in front of this hostd")
	gw, stop, err := startGateway(ctx)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	defer stop()
	req := client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512}
	var direct, through []time.Duration
	for i := range 5 {
		e.p.step(fmt.Sprintf("fleet: create direct / through the gateway %d/5", i+1))
		for _, side := range []struct {
			c *client.Client
			d *[]time.Duration
		}{{e.c, &direct}, {gw, &through}} {
			start := time.Now()
			sb, err := side.c.CreateSandbox(ctx, req)
			if err != nil {
				return fmt.Errorf("fleet: create: %w", err)
			}
			*side.d = append(*side.d, time.Since(start))
			if err := side.c.DeleteSandbox(ctx, sb.ID); err != nil {
				return err
			}
		}
	}
	t := e.t
	t.add("fleet: the control plane (a gateway on PostgreSQL) in front of this hostd, against hostd directly", "", "same hostd, interleaved")
	t.dur("  fleet: create through the gateway, p50 of 5", pct(through, 0.5), "hostd directly", pct(direct, 0.5), "≤ 1.15× floor", "")
	sb, err := gw.CreateSandbox(ctx, req)
	if err != nil {
		return err
	}
	defer gw.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
	e.p.step("fleet: exec `true`, direct and through the gateway")
	var exDirect, exThrough []time.Duration
	for range execs {
		for _, side := range []struct {
			c *client.Client
			d *[]time.Duration
		}{{e.c, &exDirect}, {gw, &exThrough}} {
			start := time.Now()
			if _, err := side.c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
				return err
			}
			*side.d = append(*side.d, time.Since(start))
		}
	}
	dp50, gp50 := pct(exDirect, 0.5), pct(exThrough, 0.5)
	t.dur("  fleet: exec `true` through the gateway, p50", gp50, "hostd directly", dp50, "≤ 1.1× floor + 2 ms",
		fmt.Sprintf("%+.1f ms; p99 %s against %s", msf(gp50-dp50), ms(pct(exThrough, 0.99)), ms(pct(exDirect, 0.99))))
	e.p.step("fleet: 64 MiB read, direct and through the gateway")
	data := make([]byte, 64<<20)
	rand.Read(data)
	if err := e.c.WriteFile(ctx, sb.ID, "/root/fleet-bench.bin", 0o644, bytes.NewReader(data)); err != nil {
		return err
	}
	var rd, rg float64
	for range 2 { // the second pass of each is the figure (page cache warm for both)
		if rd, err = readRate(ctx, e.c, sb.ID); err != nil {
			return err
		}
		if rg, err = readRate(ctx, gw, sb.ID); err != nil {
			return err
		}
	}
	t.rate("  fleet: 64 MiB file read through the gateway", rg, "hostd directly", rd, "≥ 0.9× floor", "")
	return nil
}

func readRate(ctx context.Context, c *client.Client, id string) (float64, error) {
	start := time.Now()
	if err := c.ReadFile(ctx, id, "/root/fleet-bench.bin", io.Discard); err != nil {
		return 0, err
	}
	return 64 / time.Since(start).Seconds(), nil
}

// startGateway starts PostgreSQL, registers the bench's hostd as the
// fleet's one host and serves a gateway in this process.
func startGateway(ctx context.Context) (*client.Client, func(), error) {
	pg, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Open(ctx, pg.DSN(""))
	if err != nil {
		pg.Remove()
		return nil, nil, err
	}
	cleanup := func() { st.Close(); pg.Remove() }
	if _, _, err := st.Register(ctx, store.Registration{Name: fleetHost, Addr: lastURL, TokenHash: hosttoken.Hash(hosttoken.Token(fleetSecret, fleetHost)),
		TTL: time.Hour, Capacity: store.Capacity{MemMiB: 1 << 20, VCPUs: 1 << 12}}); err != nil {
		cleanup()
		return nil, nil, err
	}
	g, err := gateway.New(gateway.Config{Store: st, Secret: fleetSecret, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		err = g.Bootstrap(ctx, fleetAdminKey)
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Serve(gctx, l) }()
	c, err := client.New("http://"+l.Addr().String(), fleetAdminKey)
	stop := func() { cancel(); <-done; cleanup() }
	if err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}
