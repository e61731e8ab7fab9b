package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/apitypes"
)

// healthTTL is how long the hosts' VMM and accelerator are remembered.
const healthTTL = 30 * time.Second

// hostsHealth caches what the fleet's hosts run, for /healthz.
type hostsHealth struct {
	mu  sync.Mutex
	at  time.Time
	got apitypes.Health
}

// health answers /healthz: the gateway is alive (it does not wait on the
// database); vmm and accel are the hosts' (asked of one live host at most
// every healthTTL; "unknown" when none answered).
func (g *Gateway) health(ctx context.Context) apitypes.Health {
	g.hh.mu.Lock()
	defer g.hh.mu.Unlock()
	if time.Since(g.hh.at) < healthTTL && g.hh.got.VMM != "" {
		return g.hh.got
	}
	h := apitypes.Health{Status: "ok", VMM: "unknown", Accel: "unknown"}
	if g.hh.got.VMM != "" {
		h = g.hh.got
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if hosts, err := g.liveHosts(cctx); err == nil && len(hosts) > 0 {
		resp, b, err := g.fwd.call(cctx, hosts[0].Name, hosts[0].Addr, http.MethodGet, "/healthz", nil, http.Header{}, 1<<16)
		var hh apitypes.Health
		if err == nil && resp.StatusCode == http.StatusOK && json.Unmarshal(b, &hh) == nil && hh.VMM != "" {
			h = apitypes.Health{Status: "ok", VMM: hh.VMM, Accel: hh.Accel}
			g.hh.at, g.hh.got = time.Now(), h
		}
	}
	return h
}
