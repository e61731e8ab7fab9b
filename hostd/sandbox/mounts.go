package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
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
func (ms mountSets) start(ctx context.Context, b *box, specs []mounts.Spec) error {
	if len(specs) == 0 {
		return nil
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
func serveMounts(b *box, set *mounts.Set, ready chan<- map[string]string) {
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
func (m *Manager) resumeMounts(ctx context.Context, b *box, dir string) error {
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
