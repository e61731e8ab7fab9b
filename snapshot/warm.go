package snapshot

import (
	"context"
	"errors"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// WarmRuns are what WarmExecs runs by default: the binary most commands
// start with, then the shell that a script (and the SDKs' run) goes
// through.
var WarmRuns = [][]string{{"true"}, {"/bin/sh", "-c", "true"}}

// warmWait is how long one warm-up command's start waits in the guest for
// its exit.
const warmWait = 5 * time.Second

// WarmExecs runs each of runs in the guest of c and waits for its exit, so
// that the exec path has run: the agent's spawn, and the guest's page cache
// of the binaries, their loader and libc. The guest forgets the sessions.
// A command the image lacks (the agent refuses to start it) is skipped.
// Warm pool VMs run it after their restore (for the VMM's translation
// cache), base snapshots before their capture (so every sandbox restored
// from one starts with that guest state). summary asks the guest for the
// flight recorder's exit summary, as a real exec would.
func WarmExecs(ctx context.Context, c *agentclient.Client, summary bool, runs [][]string) error {
	for _, argv := range runs {
		st, err := c.StartWait(ctx, agentclient.Command{Argv: argv, Forget: true}, warmWait, summary)
		if errors.Is(err, agentclient.ErrStart) {
			continue
		}
		if err != nil {
			return err
		}
		if !st.Exited {
			if _, err := c.Follow(ctx, st.ID, st.Next, func(agentclient.Output) error { return nil }); err != nil {
				return err
			}
		}
	}
	return nil
}
