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
	h, stale := g.hh.got, time.Since(g.hh.at) >= healthTTL
	if stale {
		g.hh.at = time.Now() // one refresh at a time; the others answer what is known
	}
	g.hh.mu.Unlock()
	if h.VMM == "" {
		h = apitypes.Health{Status: "ok", VMM: "unknown", Accel: "unknown"}
	}
	if !stale {
		return h
	}
	got, ok := g.askHostsHealth(ctx)
	g.hh.mu.Lock()
	defer g.hh.mu.Unlock()
	if !ok {
		g.hh.at = time.Now().Add(time.Second - healthTTL) // no host answered: ask again in a second
		return h
	}
	g.hh.got = got
	return got
}

// askHostsHealth asks one live host what it runs.
func (g *Gateway) askHostsHealth(ctx context.Context) (apitypes.Health, bool) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	hosts, err := g.liveHosts(cctx)
	if err != nil || len(hosts) == 0 {
		return apitypes.Health{}, false
	}
	resp, b, err := g.fwd.call(cctx, hosts[0].Name, hosts[0].Addr, http.MethodGet, "/healthz", nil, http.Header{}, 1<<16)
	var hh apitypes.Health
	if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &hh) != nil || hh.VMM == "" {
		return apitypes.Health{}, false
	}
	return apitypes.Health{Status: "ok", VMM: hh.VMM, Accel: hh.Accel}, true
}
