package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/hostd/mounts"
	"github.com/agentbox/agentbox/internal/s3test"
)

// mountBenchMiB is the size of the file written and read through a mount.
const mountBenchMiB = 64

// mountBenchEntries is the size of the directory listed.
const mountBenchEntries = 10000

// mountTarget is one filesystem the mount bench measures in the guest.
type mountTarget struct {
	key, label, dir string
}

// The root disk is the floor of each mount's figures.
var mountTargets = []mountTarget{
	{"disk", "root disk", "/root/bench"},
	{"host", "host dir", "/mnt/bench"},
	{"s3", "s3", "/mnt/s3"},
}

// mountStepLimit bounds one timed step in the guest: a step past it is
// reported as the limit, "timed out".
const mountStepLimit = 120 * time.Second

// mountStep is one timed step on one target.
type mountStep struct {
	ns       float64
	timedOut bool
	stats    mounts.Stats
}

// benchMounts measures, side by side in one sandbox on a hostd of its own,
// the root disk, a host-directory mount and an S3 mount (an in-process
// gofakes3 on loopback): sequential write (dd, fsynced on every target)
// and read (cat, after dropping the guest's caches), and `ls` and `ls -l`
// of a directory of 10k entries (caches dropped first). Each step is timed
// in the guest (date +%s%N), so exec's round trip is not in the figures;
// each mount figure is a ratio to the root disk's, and its notes give the
// mount calls hostd served for it (ReadStats).
func benchMounts(ctx context.Context, t *table) error {
	root, err := os.MkdirTemp("", "ab-bench-mount-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	many := filepath.Join(root, "many")
	if err := os.Mkdir(many, 0o755); err != nil {
		return err
	}
	for i := range mountBenchEntries {
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			return err
		}
	}
	s3, err := s3test.New("bench")
	if err != nil {
		return err
	}
	defer s3.Close()
	for i := range mountBenchEntries {
		if err := s3.PutDirect("bench", fmt.Sprintf("many/f%05d", i), nil); err != nil {
			return err
		}
	}
	c, stop, err := startHostdWith(ctx, func(cfg *hostd.Config) { cfg.MountRoots = []string{root} })
	if err != nil {
		return err
	}
	defer stop()
	if _, err := c.CreateSecret(ctx, "bench-s3", s3test.AccessKey+":"+s3test.SecretKey); err != nil {
		return err
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512,
		Mounts: []client.Mount{{Type: client.MountTypeHost, Source: root, Path: "/mnt/bench"},
			{Type: client.MountTypeS3, Endpoint: s3.Endpoint, Bucket: "bench", Secret: "bench-s3", Path: "/mnt/s3"}}})
	if err != nil {
		return err
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
	setup := fmt.Sprintf("mkdir -p /root/bench/many && cd /root/bench/many && seq -f f%%05g 0 %d | xargs touch", mountBenchEntries-1)
	if _, err := guestNS(ctx, c, sb.ID, setup, ""); err != nil {
		return err
	}
	res := map[string]mountStep{}
	for _, tg := range mountTargets {
		for _, s := range mountSteps(tg.dir) {
			before := mounts.ReadStats()
			mounts.ResetMaxInFlight()
			ns, err := guestNS(ctx, c, sb.ID, fmt.Sprintf("timeout %d sh -c '%s'", int(mountStepLimit.Seconds()), s.script), s.prep)
			step := mountStep{ns: ns, stats: mounts.ReadStats().Sub(before)}
			if errors.Is(err, errTimedOut) {
				step.ns, step.timedOut, err = float64(mountStepLimit), true, nil
			}
			if err != nil {
				return fmt.Errorf("mount bench %s %s: %w", tg.key, s.name, err)
			}
			res[tg.key+"-"+s.name] = step
		}
	}
	addMountFigures(t, res)
	return benchChannelFiles(ctx, t, c, sb.ID)
}

// benchChannelFiles is what the agent channel carries in this same
// sandbox without the mount protocol: 64 MiB through the files API each
// way (raw frames on a stream of their own, timed on the host; the guest's
// page cache on the other end), the bound a mount cannot pass.
func benchChannelFiles(ctx context.Context, t *table, c *client.Client, id string) error {
	const size = mountBenchMiB << 20
	start := time.Now()
	if err := c.WriteFile(ctx, id, "/root/chan", 0o644, io.LimitReader(zeros{}, size)); err != nil {
		return fmt.Errorf("channel bench write: %w", err)
	}
	in := time.Since(start)
	start = time.Now()
	cw := &countWriter{}
	if err := c.ReadFile(ctx, id, "/root/chan", cw); err != nil || cw.n != size {
		return fmt.Errorf("channel bench read: %d bytes, %v", cw.n, err)
	}
	out := time.Since(start)
	mibps := func(d time.Duration) float64 { return mountBenchMiB / d.Seconds() }
	t.rate("mount: agent channel host → guest (files API)", mibps(in), "", 0, "", "64 MiB written through the files API into the guest's page cache: what the channel carries without the mount protocol")
	t.rate("mount: agent channel guest → host (files API)", mibps(out), "", 0, "", "64 MiB read back through the files API")
	return nil
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// countWriter counts and drops what it is given.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// mountSteps are the timed steps on a target directory; prep runs first,
// untimed.
func mountSteps(dir string) []struct{ name, prep, script string } {
	drop := "sync; echo 3 > /proc/sys/vm/drop_caches"
	return []struct{ name, prep, script string }{
		{"write", "", fmt.Sprintf("dd if=/dev/zero of=%s/big bs=1M count=%d conv=fsync 2>/dev/null", dir, mountBenchMiB)},
		{"read", drop, fmt.Sprintf("cat %s/big >/dev/null", dir)},
		{"ls", drop, fmt.Sprintf("ls %s/many | wc -l >/dev/null", dir)},
		{"lsl", drop, fmt.Sprintf("ls -l %s/many | wc -l >/dev/null", dir)},
	}
}

// guestNS runs prep, then script timed in the guest, and returns script's
// nanoseconds.
func guestNS(ctx context.Context, c *client.Client, id, script, prep string) (float64, error) {
	if prep != "" {
		prep += "; "
	}
	full := prep + `s=$(date +%s%N); ` + script + ` || exit $?; e=$(date +%s%N); echo $((e-s))`
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", full}})
	if err != nil {
		return 0, err
	}
	if r.ExitCode == 124 { // timeout(1)
		return 0, errTimedOut
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(r.Stdout), 64)
	if err != nil || r.ExitCode != 0 {
		return 0, fmt.Errorf("%q %q (exit %d)", r.Stdout, r.Stderr, r.ExitCode)
	}
	return v, nil
}

// errTimedOut is a step that ran past mountStepLimit.
var errTimedOut = errors.New("timed out")

// addMountFigures adds the root disk's figures, then each mount's as a
// ratio to them.
func addMountFigures(t *table, res map[string]mountStep) {
	mibps := func(ns float64) float64 { return mountBenchMiB / (ns / 1e9) }
	dur := func(ns float64) time.Duration { return time.Duration(ns) }
	disk := func(step string) mountStep { return res["disk-"+step] }
	t.rate("mount: root disk sequential write", mibps(disk("write").ns), "", 0, "", fmt.Sprintf("dd %d MiB, bs=1M, conv=fsync, in the guest (virtio-blk)", mountBenchMiB))
	t.rate("mount: root disk sequential read", mibps(disk("read").ns), "", 0, "", fmt.Sprintf("cat %d MiB in the guest, caches dropped", mountBenchMiB))
	t.dur("mount: root disk ls of 10k entries", dur(disk("ls").ns), "", 0, "", "ls | wc -l in the guest, caches dropped")
	t.dur("mount: root disk ls -l of 10k entries", dur(disk("lsl").ns), "", 0, "", "ls -l | wc -l in the guest, caches dropped")
	for _, tg := range mountTargets[1:] {
		get := func(step string) mountStep { return res[tg.key+"-"+step] }
		name := func(what string) string {
			if tg.key == "host" {
				return "mount: " + what + " (host dir)"
			}
			return "mount: " + what + " (" + tg.label + ")"
		}
		w, r := get("write"), get("read")
		t.rate(name("sequential write"), mibps(w.ns), "root disk", mibps(disk("write").ns), "≥ 0.7× floor", "dd, as the root disk's; "+callsNote(w))
		t.rate(name("sequential read"), mibps(r.ns), "root disk", mibps(disk("read").ns), "≥ 0.7× floor", "cat, as the root disk's; "+callsNote(r))
		lsName := "ls of 10k entries"
		t.dur(name(lsName), dur(get("ls").ns), "root disk", dur(disk("ls").ns), "≤ 2× floor", callsNote(get("ls")))
		t.dur(name("ls -l of 10k entries"), dur(get("lsl").ns), "root disk", dur(disk("lsl").ns), "≤ 2× floor", callsNote(get("lsl")))
	}
}

// callsNote describes the mount calls of one step: each method's count,
// the bytes per Read and Write, the round trips per MiB moved and the most
// calls in flight at once.
func callsNote(st mountStep) string {
	s := st.stats
	pre := ""
	if st.timedOut {
		pre = fmt.Sprintf("TIMED OUT at %s (the value is the limit); ", mountStepLimit)
	}
	return pre + callsText(s)
}

// callsText is callsNote's description of the calls.
func callsText(s mounts.Stats) string {
	var names []string
	var total uint64
	for k, v := range s.Calls {
		names = append(names, k)
		total += v
	}
	slices.Sort(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Calls[k]))
	}
	out := fmt.Sprintf("%d calls (%s)", total, strings.Join(parts, ", "))
	if n := s.Calls["Read"]; n > 0 {
		out += fmt.Sprintf("; %.0f KiB/Read", float64(s.ReadBytes)/float64(n)/1024)
	}
	if n := s.Calls["Write"]; n > 0 {
		out += fmt.Sprintf("; %.0f KiB/Write", float64(s.WriteBytes)/float64(n)/1024)
	}
	if mib := float64(s.ReadBytes+s.WriteBytes) / (1 << 20); mib >= 1 {
		out += fmt.Sprintf("; %.1f calls/MiB", float64(total)/mib)
	}
	if s.DirEntries > 0 {
		out += fmt.Sprintf("; %d entries listed", s.DirEntries)
	}
	return out + fmt.Sprintf("; ≤%d in flight", s.MaxInFlight)
}
