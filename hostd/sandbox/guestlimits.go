package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// guestLimitsScript sets the limits that the guest enforces itself:
//
//   - PIDS: the pids.max of the guest cgroup agentbox-exec, in which the
//     agent starts every user command (guestinit/agent/limits.go), so a
//     fork bomb stops there and the agent (PID 1, outside it) stays up.
//   - DISK: the root filesystem keeps only DISK bytes fillable; the rest
//     is taken by a preallocated file (fallocate writes no data blocks, so
//     the host's overlay does not grow). Writes beyond the limit fail with
//     ENOSPC in the guest. The host-side bound is the overlay's virtual
//     size (the base image's), whatever the guest does to the reserve.
//     A DISK below what the filesystem already holds exits 3 with the MiB
//     in use, which is the caller's error (ErrInvalid).
const guestLimitsScript = `set -e
cg=/sys/fs/cgroup/agentbox-exec
if [ "$PIDS" -gt 0 ]; then
  grep -qw pids /sys/fs/cgroup/cgroup.subtree_control || echo +pids > /sys/fs/cgroup/cgroup.subtree_control
  mkdir -p $cg
  echo "$PIDS" > $cg/pids.max
fi
r=/.agentbox-disk-reserve
rm -f $r
if [ "$DISK" -gt 0 ]; then
  set -- $(stat -f -c '%b %a %S' /)
  reserve=$(( $1 * $3 - DISK ))
  if [ "$reserve" -gt $(( $2 * $3 )) ]; then
    echo "$(( ($1 - $2) * $3 >> 20 ))" >&2
    exit 3
  fi
  if [ "$reserve" -gt 0 ]; then fallocate -l "$reserve" $r; fi
fi
`

// applyGuestLimits runs the guest side of its limits (at create; the guest
// keeps them across pause, snapshot and fork).
func (b *runningVM) applyGuestLimits(ctx context.Context) error {
	l := b.limits
	if l.MaxPids == 0 && l.DiskMiB == 0 {
		return nil
	}
	c, err := b.client(ctx)
	if err != nil {
		return err
	}
	env := map[string]string{"PIDS": strconv.Itoa(l.MaxPids), "DISK": strconv.FormatInt(int64(l.DiskMiB)<<20, 10)}
	id, err := c.Start(ctx, agentclient.Command{Argv: []string{"/bin/sh", "-c", guestLimitsScript}, Env: env})
	if err != nil {
		return fmt.Errorf("sandbox: guest limits: %w", err)
	}
	var out bytes.Buffer
	exit, err := c.Follow(ctx, id, 0, func(o agentclient.Output) error {
		if out.Len() < 4096 { // the script says little; the guest is untrusted
			out.Write(o.Data[:min(len(o.Data), 4096-out.Len())])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sandbox: guest limits: %w", err)
	}
	if exit.Code == 3 {
		return fmt.Errorf("%w: disk_mib %d is below the %s MiB the root filesystem already holds", ErrInvalid, l.DiskMiB, bytes.TrimSpace(out.Bytes()))
	}
	if exit.Code != 0 {
		return fmt.Errorf("sandbox: guest limits exited %d: %s", exit.Code, out.String())
	}
	return nil
}
