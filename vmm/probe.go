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

// ProbeMarker is what guestinit prints in probe mode (kernel cmdline
// agentbox.probe=1) just before it powers the VM off. Backends boot the
// guest in probe mode to learn whether an accelerator really works.
const ProbeMarker = "AGENTBOX-PROBE-OK"

// ErrNoProbeMarker is returned by WaitProbe when the marker never came.
var ErrNoProbeMarker = errors.New("vmm: no probe marker")

// ProbeProcess waits for ProbeMarker from a started probe VMM process, then
// kills the process and reaps it.
func ProbeProcess(ctx context.Context, cmd *exec.Cmd, console string, timeout time.Duration) error {
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	return WaitProbe(ctx, console, done, timeout)
}

// WaitProbe waits up to timeout for ProbeMarker in the console file of a
// probe VM whose process closes exited when it ends. It returns nil once the
// marker is there, whether or not the process has exited yet.
func WaitProbe(ctx context.Context, console string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	seen := func() bool {
		b, _ := os.ReadFile(console)
		return bytes.Contains(b, []byte(ProbeMarker))
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
