package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/figures"
)

// abuse is one hostile workload run in the abused sandbox.
type abuse struct {
	name string
	run  func(ctx context.Context, c *client.Client, id string) (string, error)
}

func abuses(o options) []abuse {
	secs := int(o.abuseFor.Seconds())
	return []abuse{
		{"fork bomb (pids limit 128)", shAbuse(secs, `f(){ f | f & }; f; sleep 100000`)},
		{"disk fill to ENOSPC (disk_mib 512)", shAbuse(0, `dd if=/dev/zero of=/root/fill bs=1M 2>&1 | tail -1; rm -f /root/fill`)},
		{"memory hog (tail /dev/zero)", shAbuse(secs, `tail /dev/zero`)},
		{fmt.Sprintf("%d MiB of output, streamed", o.outputMiB), outputAbuse(o.outputMiB)},
		{fmt.Sprintf("%d files created and listed", o.listFiles), listAbuse(o.listFiles)},
	}
}

// soakAbuse measures probe's exec p50/p99 quietly, then during each abuse
// run in victim, and checks victim still answers afterwards.
func soakAbuse(ctx context.Context, c *client.Client, probe, victim client.Sandbox, o options, tb *figures.Table) error {
	progress("abuse: quiet probe for %s", o.probe)
	quiet, err := probeFor(ctx, c, probe.ID, func() bool { return false }, o.probe)
	if err != nil {
		return err
	}
	tb.Add("abuse: other sandbox's exec p50 / p99, quiet", figures.P50P99(quiet), fmt.Sprintf("%d execs", len(quiet)))
	for _, a := range abuses(o) {
		progress("abuse: %s", a.name)
		var (
			wg     sync.WaitGroup
			note   string
			runErr error
			ended  = make(chan struct{})
		)
		wg.Go(func() {
			defer close(ended)
			note, runErr = a.run(ctx, c, victim.ID)
		})
		during, err := probeFor(ctx, c, probe.ID, func() bool {
			select {
			case <-ended:
				return true
			default:
				return false
			}
		}, 0)
		wg.Wait()
		if err != nil {
			return fmt.Errorf("%s: probe: %w", a.name, err)
		}
		if runErr != nil {
			note = "abuse call failed: " + runErr.Error()
		}
		answerErr := execOnce(ctx, c, victim.ID, "after")
		if answerErr != nil {
			note += "; abused sandbox does not answer: " + answerErr.Error()
		} else {
			note += "; abused sandbox answers"
		}
		tb.Require("abuse: "+a.name+": other's exec p50 / p99", runErr == nil && answerErr == nil, figures.P50P99(during),
			fmt.Sprintf("%d execs; %s", len(during), note))
	}
	return nil
}

// probeFor runs `echo` execs in id one after another until done says so,
// or for d when d > 0, and returns their latencies.
func probeFor(ctx context.Context, c *client.Client, id string, done func() bool, d time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	end := time.Now().Add(d)
	for n := 0; ; n++ {
		if d > 0 && time.Now().After(end) || d == 0 && done() {
			return lat, nil
		}
		start := time.Now()
		if err := execOnce(ctx, c, id, fmt.Sprint(n)); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(start))
	}
}

// shAbuse runs script with sh -c, killed after secs seconds when secs > 0.
func shAbuse(secs int, script string) func(context.Context, *client.Client, string) (string, error) {
	return func(ctx context.Context, c *client.Client, id string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, opTimeout+time.Duration(secs)*time.Second)
		defer cancel()
		r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", script + " >/dev/null 2>&1"}, TimeoutS: secs})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("exit %d %s", r.ExitCode, r.Signal), nil
	}
}

func outputAbuse(mib int) func(context.Context, *client.Client, string) (string, error) {
	return func(ctx context.Context, c *client.Client, id string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 3*opTimeout)
		defer cancel()
		var n int64
		start := time.Now()
		err := c.ExecStream(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", fmt.Sprintf("head -c %dM /dev/zero", mib)}},
			func(e client.Event) error { n += int64(len(e.Data)); return nil })
		return fmt.Sprintf("%.0f MiB received in %s", float64(n)/(1<<20), time.Since(start).Round(time.Millisecond)), err
	}
}

func listAbuse(files int) func(context.Context, *client.Client, string) (string, error) {
	return func(ctx context.Context, c *client.Client, id string) (string, error) {
		mk := fmt.Sprintf(`rm -rf /root/many; mkdir /root/many; cd /root/many; seq 1 %d | xargs touch`, files)
		// Making the files is the setup, not the abuse measured: under TCG
		// on a loaded machine 100k of them can take over opTimeout.
		if _, err := runFor(ctx, c, id, mk, 5*opTimeout); err != nil {
			return "", err
		}
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		start := time.Now()
		list, err := c.ListDir(ctx, id, "/root/many")
		note := fmt.Sprintf("%d entries listed in %s", len(list), time.Since(start).Round(time.Millisecond))
		run1(context.WithoutCancel(ctx), c, id, "rm -rf /root/many")
		return note, err
	}
}
