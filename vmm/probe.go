package vmm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// ErrNoProbeMarker is returned by WaitProbe when the marker never came.
var ErrNoProbeMarker = errors.New("vmm: no probe marker")

// ProbeProcess waits for marker (the line guestinit prints in probe mode)
// from a started probe VMM process, then kills the process and reaps it.
func ProbeProcess(ctx context.Context, cmd *exec.Cmd, console, marker string, timeout time.Duration) error {
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	return WaitProbe(ctx, console, marker, done, timeout)
}

// WaitProbe waits up to timeout for marker in the console file of a
// probe VM whose process closes exited when it ends. It returns nil once the
// marker is there, whether or not the process has exited yet.
func WaitProbe(ctx context.Context, console, marker string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	seen := func() bool {
		b, _ := os.ReadFile(console)
		return bytes.Contains(b, []byte(marker))
	}
	for {
		select {
		case <-exited:
			if seen() {
				return nil
			}
			return fmt.Errorf("%w: the VMM exited", ErrNoProbeMarker)
		case <-ctx.Done():
			if seen() {
				return nil
			}
			return fmt.Errorf("%w within %v", ErrNoProbeMarker, timeout)
		case <-tick.C:
			if seen() {
				return nil
			}
		}
	}
}
