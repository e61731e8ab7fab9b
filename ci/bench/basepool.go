package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
)

// benchBasePool measures a create without a template served from the base
// snapshot's warm pool (hostd's default, BasePool 1), on a hostd of its own.
func benchBasePool(ctx context.Context, e *env) error {
	e.p.step("base warm pool: hostd with a pool")
	var key string
	ph := newPhases(nil)
	c, stop, err := startHostdWith(ctx, func(cfg *hostd.Config) {
		key = cfg.APIKey
		ph.Handler = cfg.Logger.Handler()
		cfg.Logger = slog.New(ph)
	})
	if err != nil {
		return err
	}
	defer stop()
	url := lastURL
	e.p.step("base warm pool: first create (boot + base snapshot)")
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		return err
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		return err
	}
	var d []time.Duration
	for i := range 3 {
		e.p.step(fmt.Sprintf("base warm pool: claim %d/3", i+1))
		if err := waitBasePool(ctx, url, key); err != nil {
			return err
		}
		ph.take()
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
		if err == nil {
			_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
		}
		if err != nil {
			return err
		}
		d = append(d, time.Since(start))
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			return err
		}
	}
	e.t.dur("create without a template from the base warm pool → first exec done, p50 of 3", pct(d, 0.5), "", 0, "≤ 100 ms", "")
	e.t.addPhases("base claim", ph)
	return nil
}

// waitBasePool waits until hostd's metrics show a warm sandbox in the base
// snapshot's pool (agentbox_pool_ready{template="@base:..."}).
func waitBasePool(ctx context.Context, url, key string) error {
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(resp.Body)
		ready := false
		for sc.Scan() {
			l := sc.Text()
			if strings.HasPrefix(l, `agentbox_pool_ready{template="@base:`) && !strings.HasSuffix(l, " 0") {
				ready = true
			}
		}
		resp.Body.Close()
		if ready {
			return nil
		}
	}
	return fmt.Errorf("the base warm pool did not fill")
}
