package sandbox

import (
	"context"
	"time"
)

// A guest's clock comes from the host: the guest has no clock source of
// its own worth trusting (a cold boot under TCG starts ~2 s behind, a
// restored VM is as old as its snapshot). hostd sets it when the agent
// first answers after a boot (boot) or a restore (wake), and again every
// clockResync while the sandbox runs (keepClock), so the times the guest
// stamps (exec ends, file events) are on the recorder's clock too.

// clockResync is how often a running guest's clock is set again.
const clockResync = time.Minute

// setClock sets b's guest clock to the host's.
func setClock(ctx context.Context, b *runningVM) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := b.client(ctx)
	if err != nil {
		return err
	}
	return c.SetTime(ctx, time.Now())
}

// keepClock sets the guest clock every clockResync until b goes.
func (b *runningVM) keepClock() {
	b.every(clockResync, func() {
		if err := setClock(context.Background(), b); err != nil {
			b.log.Debug("guest clock", "sandbox_id", b.id, "err", err)
		}
	})
}

// hostTime puts a time the guest stamped on the recorder's clock: never
// later than now (a guest clock ahead, or a guest lying).
func hostTime(guest time.Time) time.Time {
	if now := time.Now(); guest.IsZero() || guest.After(now) {
		return now
	}
	return guest
}
