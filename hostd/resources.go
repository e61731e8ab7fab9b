package hostd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// instanceName is cfg.Instance, or one derived from the data directory.
func instanceName(cfg Config) string {
	if cfg.Instance != "" {
		return cfg.Instance
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		abs = cfg.DataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return "i-" + hex.EncodeToString(sum[:6])
}

// openCgroups returns the VMM cgroup manager, or nil (logged) where the
// host has no usable cgroups: sandboxes then run without CPU quota and
// host memory caps, and requests for them are refused.
func openCgroups(cfg Config, log *slog.Logger) (*cgroup.Manager, error) {
	if cfg.NoCgroups {
		log.Info("no cgroups: turned off by the config")
		return nil, nil
	}
	cg, err := cgroup.New(instanceName(cfg))
	if errors.Is(err, cgroup.ErrUnavailable) {
		log.Warn("no cgroups: VMM processes run without CPU and memory caps", "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hostd: %w", err)
	}
	log.Info("vmm cgroups", "version", cg.Version(), "parent", cg.Parent())
	return cg, nil
}

// closeCgroups removes the instance's cgroup parent once every sandbox
// has stopped.
func closeCgroups(cg *cgroup.Manager, log *slog.Logger) {
	if cg == nil {
		return
	}
	if err := cg.Close(); err != nil {
		log.Warn("vmm cgroups left", "err", err)
	}
}

// LimitsFile is the JSON file of `agentbox serve --limits`:
//
//	{"default": {"cpu_quota": 1, "max_pids": 512, "idle_timeout_s": 900},
//	 "max": {"cpu_quota": 2, "host_memory_mib": 8192},
//	 "keys": {"team-a": {"vcpus": 2, "memory_mib": 2048, "limits": {"cpu_quota": 1}}}}
type LimitsFile struct {
	sandbox.LimitOptions
	Keys map[string]sandbox.Maximums `json:"keys"`
	// Projects are per-project quotas, by project name:
	// {"projects": {"team-a": {"sandboxes": 10, "memory_mib": 8192,
	// "vcpus": 8, "snapshot_bytes": 10737418240}}}.
	Projects map[string]api.Quota `json:"projects"`
}

// LoadLimits reads a LimitsFile into cfg.
func LoadLimits(path string, cfg *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("hostd: limits: %w", err)
	}
	var f LimitsFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("hostd: limits %s: %w", path, err)
	}
	cfg.Limits, cfg.KeyMaximums, cfg.ProjectQuotas = f.LimitOptions, f.Keys, f.Projects
	return nil
}
