package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
)

// benchRecorder measures what the flight recorder costs: the same calls
// against c (recorder on) and a second hostd with it off, interleaved so
// that both see the same machine.
func benchRecorder(ctx context.Context, on *client.Client, t *table, n int) error {
	off, stop, err := startHostdWith(ctx, func(cfg *hostd.Config) { cfg.Recorder = "off" })
	if err != nil {
		return err
	}
	defer stop()
	sbs := make([]client.Sandbox, 2)
	for i, c := range []*client.Client{on, off} {
		if sbs[i], err = c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512}); err != nil {
			return err
		}
		defer c.DeleteSandbox(context.WithoutCancel(ctx), sbs[i].ID)
	}
	clients := []*client.Client{on, off}
	run := func(reps int, cmd []string) ([2]time.Duration, error) {
		var d [2][]time.Duration
		for range reps {
			for i, c := range clients {
				start := time.Now()
				if _, err := c.Exec(ctx, sbs[i].ID, client.ExecRequest{Cmd: cmd}); err != nil {
					return [2]time.Duration{}, err
				}
				d[i] = append(d[i], time.Since(start))
			}
		}
		return [2]time.Duration{pct(d[0], 0.5), pct(d[1], 0.5)}, nil
	}
	p, err := run(n/2, []string{"true"})
	if err != nil {
		return err
	}
	t.add(fmt.Sprintf("exec `true`, flight recorder on ÷ off, p50 of %d each", n/2), fmt.Sprintf("%.2f×", float64(p[0])/float64(p[1])), ms(p[0])+" vs "+ms(p[1]))
	p, err = run(10, []string{"sh", "-c", "for i in $(seq 100); do echo $i > /root/f$i; done; rm -f /root/f*"})
	if err != nil {
		return err
	}
	t.add("exec writing + removing 100 files (200 file events), recorder on ÷ off, p50 of 10", fmt.Sprintf("%.2f×", float64(p[0])/float64(p[1])), ms(p[0])+" vs "+ms(p[1]))
	var f [2][]time.Duration
	for range 3 {
		for i, c := range clients {
			start := time.Now()
			forks, err := c.Fork(ctx, sbs[i].ID, 1)
			if err != nil {
				return err
			}
			f[i] = append(f[i], time.Since(start))
			if err := c.DeleteSandbox(ctx, forks[0].ID); err != nil {
				return err
			}
		}
	}
	a, b := pct(f[0], 0.5), pct(f[1], 0.5)
	t.add("fork 1, flight recorder on ÷ off, p50 of 3 each", fmt.Sprintf("%.2f×", float64(a)/float64(b)), ms(a)+" vs "+ms(b))
	return nil
}
