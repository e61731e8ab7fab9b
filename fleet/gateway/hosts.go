package gateway

import (
	"net/http"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/store"
)

// hostsAPI routes /v1/hosts and /v1/hosts/{name}/{cordon,uncordon,drain}
// (admins only): the operator's view of the fleet.
func (g *Gateway) hostsAPI(w http.ResponseWriter, r *http.Request, rest []string) string {
	if !isAdmin(r.Context()) {
		g.writeError(w, errorf(http.StatusForbidden, CodeForbidden, "hosts are managed with an admin key"))
		return "hosts"
	}
	dctx, cancel := g.dbctx(r.Context())
	defer cancel()
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		hs, err := g.st.Hosts(dctx)
		if err != nil {
			g.writeError(w, err)
			return "hosts"
		}
		out := apitypes.HostList{Hosts: []apitypes.Host{}}
		for _, h := range hs {
			out.Hosts = append(out.Hosts, g.hostInfo(h))
		}
		writeJSON(w, http.StatusOK, out)
	case len(rest) == 2 && r.Method == http.MethodPost:
		admin, ok := map[string]string{"cordon": store.AdminCordoned, "uncordon": store.AdminActive, "drain": store.AdminDraining}[rest[1]]
		if !ok {
			g.writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no such host action: %s (cordon, uncordon, drain)", rest[1]))
			return "hosts"
		}
		h, err := g.st.SetAdmin(dctx, rest[0], admin)
		if isNotFound(err) {
			err = errorf(http.StatusNotFound, CodeNotFound, "host not found: %s", rest[0])
		}
		if err != nil {
			g.writeError(w, err)
			return "hosts"
		}
		g.log.Info("host admin state", "host", h.Name, "admin", admin)
		if admin == store.AdminDraining && g.cfg.Portable {
			cancel()
			g.writeDrain(w, r, h)
			return "hosts_drain"
		}
		writeJSON(w, http.StatusOK, g.hostInfo(h))
	default:
		g.writeError(w, errorf(http.StatusMethodNotAllowed, CodeInvalid, "method %s not allowed", r.Method))
	}
	return "hosts"
}

func (g *Gateway) hostInfo(h store.Host) apitypes.Host {
	return apitypes.Host{Name: h.Name, Addr: h.Addr, State: h.State, Admin: h.Admin, Reason: h.Reason, Epoch: h.Epoch,
		LeaseUntil: h.LeaseUntil, Heartbeat: h.Heartbeat, MemoryMiB: h.MemMiB, VCPUs: h.VCPUs, UsedMemoryMiB: h.UsedMemMiB,
		UsedVCPUs: h.UsedVCPUs, Sandboxes: h.UsedSandboxes, MaxSandboxes: h.MaxSandboxes, Running: h.Running,
		Templates: h.Templates, Warm: h.Warm, TokenAccepted: h.TokenHash == hosttoken.Hash(g.fwd.token(h.Name))}
}
