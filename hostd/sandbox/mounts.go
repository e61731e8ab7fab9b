package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/mounts"
)

// mountsFile is where a sandbox's mounts are kept, in its directory, so that
// a resume (and a fork, which takes its parent's) serves them again.
const mountsFile = "mounts.json"

// mountReadyTimeout bounds the guest's mounting of a new VM's mounts.
const mountReadyTimeout = 30 * time.Second

// mountSets serves sandboxes' mounts (hostd/mounts): each box opens its
// sandbox's sources, serves them on a stream it opens on channel.MountPort,
// opens another whenever the stream breaks (a restore, a fork, a resume, a
// channel reset), and closes the sources when the box ends.
type mountSets struct {
	cfg mounts.Config
}

// newMountSets stages git clones under the data directory and finds forks'
// parent clones in the sandboxes' directories.
func newMountSets(cfg mounts.Config, dataDir string) mountSets {
	if cfg.StageDir == "" {
		cfg.StageDir = filepath.Join(dataDir, "mounts-stage")
	}
	if cfg.CloneRoot == "" {
		cfg.CloneRoot = filepath.Join(dataDir, "sandboxes")
	}
	return mountSets{cfg: cfg}
}

// unstage removes the git clones that validate staged and no sandbox took.
func (ms mountSets) unstage(specs []mounts.Spec) {
	_ = ms.cfg.Unstage(specs)
}

// gitEgress lets a sandbox with git mounts reach their hosts through the
// egress proxy, which injects the mount's secret as a bearer token (the
// guest's origin carries no credential): one allow and one inject rule per
// git host, unless the caller's policy already has an inject rule for it.
func gitEgress(opts *CreateOptions) {
	pol := opts.Network
	if pol == nil || pol.Mode != egress.ModeProxy {
		return
	}
	for _, s := range opts.Mounts {
		host := mounts.GitHost(s)
		if s.Type != mounts.TypeGit || host == "" {
			continue
		}
		if !slices.Contains(pol.AllowDomains, host) {
			pol.AllowDomains = append(pol.AllowDomains, host)
		}
		if s.Secret == "" || slices.ContainsFunc(pol.Inject, func(r egress.InjectRule) bool { return r.Host == host }) {
			continue
		}
		pol.Inject = append(pol.Inject, egress.InjectRule{Host: host, Header: "Authorization", Value: "Bearer {{secret:" + s.Secret + "}}"})
	}
}

// validate checks a create's mounts (before anything is made).
func (ms mountSets) validate(ctx context.Context, specs []mounts.Spec) ([]mounts.Spec, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out, err := ms.cfg.Validate(ctx, specs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return out, nil
}

// saved returns the mounts recorded in a sandbox's directory.
func (ms mountSets) saved(dir string) ([]mounts.Spec, error) {
	b, err := os.ReadFile(filepath.Join(dir, mountsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var specs []mounts.Spec
	return specs, json.Unmarshal(b, &specs)
}

// start records specs in b's directory and serves them to b's guest; it
// returns once the guest has mounted them. On failure the caller stops b.
func (ms mountSets) start(ctx context.Context, b *runningVM, specs []mounts.Spec) error {
	if len(specs) == 0 {
		return nil
	}
	specs, err := ms.cfg.Adopt(specs, b.dir)
	if err != nil {
		return err
	}
	data, err := json.Marshal(specs)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.dir, mountsFile), data, 0o600); err != nil {
		return err
	}
	set, err := ms.cfg.Open(ctx, specs)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ready := make(chan map[string]string, 1)
	if !b.spawn(func() { serveMounts(b, set, ready) }) {
		set.Close()
		return errors.New("sandbox: manager closing")
	}
	select {
	case errs := <-ready:
		if len(errs) > 0 {
			return fmt.Errorf("sandbox: the guest could not mount: %s", joinErrs(errs))
		}
		return nil
	case <-time.After(mountReadyTimeout):
		return errors.New("sandbox: the guest did not mount its mounts in time")
	case <-ctx.Done():
		return ctx.Err()
	case <-b.vm.Done():
		return fmt.Errorf("%w: vm exited", ErrNotRunning)
	}
}

// serveMounts serves set on b's mount streams until b ends, then closes it.
// The first Ready report goes to ready.
func serveMounts(b *runningVM, set *mounts.Set, ready chan<- map[string]string) {
	defer set.Close()
	ctx, cancel := b.bind(context.Background())
	defer cancel()
	report := func(errs map[string]string) {
		select {
		case ready <- errs:
		default:
		}
	}
	for ctx.Err() == nil {
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		conn, err := b.vm.Dial(dctx, channel.MountPort)
		dcancel()
		if err == nil {
			if err := set.Serve(ctx, conn, report); err != nil {
				b.log.Debug("mount stream", "sandbox_id", b.id, "err", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-b.vm.Done():
			return
		case <-time.After(200 * time.Millisecond): // the channel resets: open a new stream
		}
	}
}

func joinErrs(errs map[string]string) string {
	var parts []string
	for id, e := range errs {
		parts = append(parts, id+": "+e)
	}
	return strings.Join(parts, "; ")
}

// resumeMounts serves a resumed sandbox's saved mounts; on failure it stops
// the VM (the sandbox stays paused).
func (m *Manager) resumeMounts(ctx context.Context, b *runningVM, dir string) error {
	specs, err := m.mnts.saved(dir)
	if err == nil {
		err = m.mnts.start(ctx, b, specs)
	}
	if err != nil {
		b.end(err)
		return errors.Join(err, b.vm.Stop(context.WithoutCancel(ctx)))
	}
	return nil
}
