package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/internal/steps"
	"github.com/agentbox/agentbox/vmm"
)

// Probe checks a new agent connection: the guest's answer to its first
// calls.
type Probe func(ctx context.Context, c *agentclient.Client) error

// Guest is a restored VM's agent connection as its owner keeps it (hostd's
// running sandbox).
type Guest interface {
	// Reconnect connects the guest's agent within timeout, in attempts:
	// each new connection is checked by probe, and one that fails it or
	// gets no answer is dropped for a fresh one. On failure it stops the VM.
	Reconnect(ctx context.Context, timeout time.Duration, probe Probe) error
	// Client returns the open agent connection, dialing one if needed.
	Client(ctx context.Context) (*agentclient.Client, error)
}

// WakeOptions are the choices of a Wake.
type WakeOptions struct {
	// ID is the sandbox's id: with Identity, the guest's new hostname, and
	// it gets a new machine id (a new sandbox, not a resumed one).
	ID       string
	Identity bool
	// Timeout bounds the agent's connection.
	Timeout time.Duration
	// Phase, if set, is told each step's name once it ran (resume, agent).
	Phase func(name string)
}

// Wake resumes restored VM vm, connects its agent through g, and sets the
// guest's clock, entropy and (with o.Identity) identity before any user
// command runs. On failure the VM is stopped.
func Wake(ctx context.Context, vm vmm.VM, g Guest, o WakeOptions) error {
	stop := func(err error) error { return errors.Join(err, vm.Stop(context.WithoutCancel(ctx))) }
	return steps.List{
		{Name: "resume", Run: func(ctx context.Context) error {
			if err := vm.Resume(ctx); err != nil {
				return stop(err)
			}
			return nil
		}},
		{Name: "agent", Run: func(ctx context.Context) error { // channel reset and handshake: clock, entropy, identity
			connected, err := connectFresh(ctx, g, o)
			if err != nil && connected {
				return stop(err)
			}
			return err // a failed Reconnect stopped the VM
		}},
	}.Run(ctx, o.Phase)
}

// connectFresh connects g's agent and freshens the guest. The clock,
// entropy and identity calls are the new connection's probe: the guest's
// answer to them is its agent's, with no Health call before. Only a call
// that got no answer (the channel closed, the attempt's time ran out)
// tries a new connection; an error the agent answered fails at once, as a
// new connection would get it too. connected reports whether the agent
// answered (an error is then the guest's, and the VM still runs).
func connectFresh(ctx context.Context, g Guest, o WakeOptions) (connected bool, err error) {
	prepared := false
	var prepErr error
	probe := func(ctx context.Context, c *agentclient.Client) error {
		err := Freshen(ctx, c, o.ID, o.Identity)
		if err != nil && (errors.Is(err, agentclient.ErrClosed) || ctx.Err() != nil) {
			return err
		}
		prepared, prepErr = true, err
		return nil
	}
	if err := g.Reconnect(ctx, o.Timeout, probe); err != nil {
		return false, err
	}
	if !prepared { // the guest had a connection already
		c, err := g.Client(ctx)
		if err == nil {
			err = Freshen(ctx, c, o.ID, o.Identity)
		}
		prepErr = err
	}
	return true, prepErr
}

// Freshen sets a restored guest's clock and reseeds its RNG and, with
// identity, gives it hostname id and a new machine id: in one round trip,
// not three, as the agent serves the calls concurrently.
func Freshen(ctx context.Context, c *agentclient.Client, id string, identity bool) error {
	entropy := make([]byte, 64)
	_, _ = rand.Read(entropy)
	var wg sync.WaitGroup
	var errs [3]error
	wg.Go(func() { errs[0] = c.SetTime(ctx, time.Now()) })
	wg.Go(func() { errs[1] = c.Reseed(ctx, entropy) })
	if identity {
		wg.Go(func() { errs[2] = c.SetIdentity(ctx, id, newMachineID()) })
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("snapshot: prepare restored guest: %w", err)
	}
	return nil
}

func newMachineID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SavePaused saves running vm whole to dir for a later resume of the same
// sandbox (vmm.Driver.Restore of dir, then Wake): the guest's filesystems
// are flushed through f, the VM is paused, its device state and memory are
// written to dir and synced, as the VM ends next. dir is made anew. The
// VM stays paused; on error the caller resumes it.
func SavePaused(ctx context.Context, vm vmm.VM, f Flusher, dir string) error {
	if err := errors.Join(f.Freeze(ctx), f.Thaw(ctx)); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := vm.Pause(ctx); err != nil {
		return err
	}
	if err := vm.Snapshot(ctx, dir); err != nil {
		return err
	}
	return SyncVMFiles(dir)
}
