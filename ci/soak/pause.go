package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/figures"
)

// pauseCounter is the file the pause/resume part's counter process writes.
const pauseCounter = "/root/counter"

// counterScript counts into path every 0.1 s (each value written whole).
func counterScript(path string) string {
	return fmt.Sprintf(`i=0; while :; do i=$((i+1)); echo $i > %[1]s.tmp; mv %[1]s.tmp %[1]s; sleep 0.1; done`, path)
}

// soakPause fills sb with o.files random files and their sha256 manifest,
// starts a counter process, then pauses and resumes sb o.cycles times,
// checking after each resume every file against the manifest and that the
// counter went on.
func soakPause(ctx context.Context, c *client.Client, sb client.Sandbox, o options, tb *figures.Table) error {
	progress("pause/resume: %d files, %d cycles", o.files, o.cycles)
	fill := fmt.Sprintf(`set -e; rm -rf /root/pr; mkdir /root/pr; cd /root/pr
i=0; while [ $i -lt %d ]; do i=$((i+1)); head -c $((i*97 %% 8192 + 1)) /dev/urandom > f$i; done
sha256sum f* | sort`, o.files)
	manifest, err := run1(ctx, c, sb.ID, fill)
	if err != nil {
		return err
	}
	counterID, err := c.ExecBackground(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh", "-c", counterScript(pauseCounter)}})
	if err != nil {
		return err
	}
	defer c.Signal(context.WithoutCancel(ctx), sb.ID, counterID, "SIGKILL")
	last, err := waitCounter(ctx, c, sb.ID, pauseCounter)
	if err != nil {
		return err
	}
	first := last
	var pauses, resumes []time.Duration
	mismatches, stalls := 0, 0
	for i := range o.cycles {
		if err := cycle(ctx, c, sb.ID, &pauses, &resumes); err != nil {
			return fmt.Errorf("cycle %d: %w", i+1, err)
		}
		now, err := run1(ctx, c, sb.ID, "cd /root/pr && sha256sum f* | sort")
		if err != nil {
			return fmt.Errorf("cycle %d: %w", i+1, err)
		}
		mismatches += diffLines(manifest, now)
		n, err := readCounter(ctx, c, sb.ID, pauseCounter)
		if err != nil {
			return fmt.Errorf("cycle %d: %w", i+1, err)
		}
		if n <= last {
			stalls++
		}
		last = n
		if (i+1)%10 == 0 {
			progress("pause/resume: %d of %d cycles", i+1, o.cycles)
		}
	}
	running, err := sessionRunning(ctx, c, sb.ID, counterID)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("pause/resume %d cycles", o.cycles)
	tb.Add(name+": pause p50 / p99", figures.P50P99(pauses), "")
	tb.Add(name+": resume p50 / p99", figures.P50P99(resumes), "")
	tb.Goal(fmt.Sprintf("%s: checksum mismatches over %d files", name, o.files), mismatches, "checked after every resume")
	// A cycle where the counter did not advance is a note, not a failure:
	// on a loaded host the guest may not have run 0.1 s between two reads.
	ok := running && last > first
	tb.Require(name+": counter process still running", ok, yesNo(ok),
		fmt.Sprintf("counter %d → %d; %d cycles where it did not advance", first, last, stalls))
	return nil
}

func cycle(ctx context.Context, c *client.Client, id string, pauses, resumes *[]time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 2*opTimeout)
	defer cancel()
	start := time.Now()
	if _, err := c.Pause(ctx, id); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	*pauses = append(*pauses, time.Since(start))
	start = time.Now()
	if _, err := c.Resume(ctx, id); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	*resumes = append(*resumes, time.Since(start))
	return nil
}

// run1 runs script with sh -c and returns its stdout; a non-zero exit is an
// error.
func run1(ctx context.Context, c *client.Client, id, script string) (string, error) {
	return runFor(ctx, c, id, script, opTimeout)
}

// runFor is run1 bounded by d instead of opTimeout.
func runFor(ctx context.Context, c *client.Client, id, script string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", script}})
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return "", fmt.Errorf("%.60q: exit %d: %s", script, r.ExitCode, strings.TrimSpace(r.Stderr))
	}
	return r.Stdout, nil
}

// readCounter reads the counter a counterScript writes to path.
func readCounter(ctx context.Context, c *client.Client, id, path string) (int, error) {
	out, err := run1(ctx, c, id, "cat "+path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// waitCounter reads the counter once the process has written it (its
// start can take a while on a loaded host).
func waitCounter(ctx context.Context, c *client.Client, id, path string) (int, error) {
	deadline := time.Now().Add(opTimeout)
	for {
		n, err := readCounter(ctx, c, id, path)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return n, err
		}
		time.Sleep(time.Second)
	}
}

func sessionRunning(ctx context.Context, c *client.Client, id, execID string) (bool, error) {
	ss, err := c.ListExecs(ctx, id)
	if err != nil {
		return false, err
	}
	for _, s := range ss {
		if s.ExecID == execID {
			return s.Running, nil
		}
	}
	return false, nil
}

// diffLines counts the lines of want (one file's checksum each) that got
// lacks: a changed or lost file.
func diffLines(want, got string) int {
	have := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		have[l] = true
	}
	n := 0
	for _, l := range strings.Split(want, "\n") {
		if !have[l] {
			n++
		}
	}
	return n
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
