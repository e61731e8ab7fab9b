package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/s3test"
)

// mountBenchMiB is the size of the file written and read through a mount.
const mountBenchMiB = 64

// benchMounts measures a host-directory mount and an S3 mount (an
// in-process gofakes3 on loopback) from inside a sandbox, on a hostd of its
// own: sequential write and read throughput, and `ls` of a
// directory of 10k entries. Each step is timed in the guest (date +%s%N),
// so exec's round trip is not in the figures.
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
	for i := range 10000 {
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			return err
		}
	}
	s3, err := s3test.New("bench")
	if err != nil {
		return err
	}
	defer s3.Close()
	for i := range 10000 {
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
	steps := []struct{ name, script string }{
		{"write", fmt.Sprintf("dd if=/dev/zero of=/mnt/bench/big bs=1M count=%d 2>/dev/null", mountBenchMiB)},
		{"read", "cat /mnt/bench/big >/dev/null"},
		{"ls", "ls /mnt/bench/many | wc -l >/dev/null"},
		{"disk-write", fmt.Sprintf("dd if=/dev/zero of=/root/big bs=1M count=%d conv=fsync 2>/dev/null", mountBenchMiB)},
		{"s3-write", fmt.Sprintf("dd if=/dev/zero of=/mnt/s3/big bs=1M count=%d 2>/dev/null", mountBenchMiB)},
		{"s3-read", "cat /mnt/s3/big >/dev/null"},
		{"s3-ls", "ls /mnt/s3/many | wc -l >/dev/null"},
	}
	ns := map[string]float64{}
	for _, s := range steps {
		script := `s=$(date +%s%N); ` + s.script + `; e=$(date +%s%N); echo $((e-s))`
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh", "-c", script}})
		if err != nil {
			return fmt.Errorf("mount bench %s: %w", s.name, err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(r.Stdout), 64)
		if err != nil || r.ExitCode != 0 {
			return fmt.Errorf("mount bench %s: %q %q (exit %d)", s.name, r.Stdout, r.Stderr, r.ExitCode)
		}
		ns[s.name] = v
	}
	mibps := func(n float64) string { return fmt.Sprintf("%.1f MiB/s", mountBenchMiB/(n/1e9)) }
	t.add("mount: sequential write (host dir)", mibps(ns["write"]), fmt.Sprintf("dd %d MiB, bs=1M, in the guest; root disk: %s", mountBenchMiB, mibps(ns["disk-write"])))
	t.add("mount: sequential read (host dir)", mibps(ns["read"]), fmt.Sprintf("cat %d MiB in the guest", mountBenchMiB))
	t.add("mount: ls of 10k entries", fmt.Sprintf("%.1f ms", ns["ls"]/1e6), "ls | wc -l in the guest")
	t.add("mount: sequential write (s3)", mibps(ns["s3-write"]), fmt.Sprintf("dd %d MiB, bs=1M, in the guest, to a temp file on the host, then one upload on close (loopback gofakes3, memory)", mountBenchMiB))
	t.add("mount: sequential read (s3)", mibps(ns["s3-read"]), fmt.Sprintf("cat %d MiB in the guest, one streamed GET", mountBenchMiB))
	t.add("mount: ls of 10k entries (s3)", fmt.Sprintf("%.1f ms", ns["s3-ls"]/1e6), "ls | wc -l in the guest; listing by prefix and delimiter")
	return nil
}
