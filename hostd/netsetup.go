package hostd

import (
	"fmt"
	"os"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/internal/fdbudget"
	"github.com/agentbox/agentbox/hostd/metrics"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/sandboxnet"
	"github.com/agentbox/agentbox/hostd/secrets"
	"github.com/agentbox/agentbox/hostd/store"
)

// newNetwork builds the secret box, the egress CA and the sandbox network
// service. With cfg.Network "off" there is no network service (sandboxes get
// no NIC), but secrets are still served. met counts the leftover namespaces
// that cannot be removed; the proxy's connections take their descriptors
// from fds.
func newNetwork(cfg Config, st *store.Store, met *metrics.Metrics, fds *fdbudget.Budget) (sandbox.Network, *secrets.Box, error) {
	box, err := secrets.Open(cfg.DataDir, st)
	if err != nil {
		return nil, nil, fmt.Errorf("hostd: %w", err)
	}
	switch cfg.Network {
	case "off":
		return nil, box, nil
	case "proxy":
	default:
		return nil, nil, fmt.Errorf("hostd: network %q: want proxy or off", cfg.Network)
	}
	ca, err := egress.LoadOrCreateCA(cfg.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("hostd: %w", err)
	}
	var roots []byte
	if cfg.EgressUpstreamCA != "" {
		if roots, err = os.ReadFile(cfg.EgressUpstreamCA); err != nil {
			return nil, nil, fmt.Errorf("hostd: egress upstream CA: %w", err)
		}
	}
	svc, err := sandboxnet.New(sandboxnet.Options{
		DataDir: cfg.DataDir, Store: st, Logger: cfg.Logger, Unremoved: met.NetnsUnremoved,
		Proxy: egress.Options{CA: ca, Secrets: box, Hosts: cfg.EgressHosts, UpstreamRootsPEM: roots,
			MaxConnsPerSandbox: cfg.EgressConnsPerSandbox, Budget: fds},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("hostd: %w", err)
	}
	return svc, box, nil
}
