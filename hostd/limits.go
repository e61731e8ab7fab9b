package hostd

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/vmm"
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

// vmmOwner resolves cfg.VMMUser for the manager; only QEMU can drop to it.
func vmmOwner(cfg Config, drv vmm.Driver) (*sandbox.Owner, error) {
	if cfg.VMMUser == "" {
		return nil, nil
	}
	if drv.Name() != "qemu" {
		return nil, fmt.Errorf("hostd: VMMUser %q: only the qemu backend can drop privileges (-runas)", cfg.VMMUser)
	}
	u, err := user.Lookup(cfg.VMMUser)
	if err != nil {
		return nil, fmt.Errorf("hostd: VMMUser: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil || uid == 0 {
		return nil, fmt.Errorf("hostd: VMMUser %q: want an unprivileged user (uid %s): %v", cfg.VMMUser, u.Uid, err)
	}
	return &sandbox.Owner{UID: uid, GID: gid}, nil
}
