package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

// table collects the figures to print.
type table struct{ rows [][3]string }

func (t *table) add(name, value, note string) { t.rows = append(t.rows, [3]string{name, value, note}) }

func (t *table) print(w io.Writer) {
	width := [3]int{}
	for _, r := range t.rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(r [3]string) {
		fmt.Fprintf(w, "| %-*s | %*s | %-*s |\n", width[0], r[0], width[1], r[1], width[2], r[2])
	}
	line([3]string{"benchmark", "value", "notes"})
	fmt.Fprintf(w, "|%s|%s|%s|\n", strings.Repeat("-", width[0]+2), strings.Repeat("-", width[1]+2), strings.Repeat("-", width[2]+2))
	for _, r := range t.rows {
		line(r)
	}
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func benchBoot(ctx context.Context, c *client.Client, t *table, n int) (time.Duration, error) {
	var d []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
		if err != nil {
			return 0, err
		}
		d = append(d, time.Since(start))
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			return 0, err
		}
	}
	t.add("cold boot → agent ready (create API), p50 of "+strconv.Itoa(n), ms(pct(d, 0.5)), "min "+ms(pct(d, 0))+", max "+ms(pct(d, 1)))
	return pct(d, 0.5), nil
}

func benchExec(ctx context.Context, c *client.Client, sb client.Sandbox, t *table, n int) error {
	var guest, local []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
			return err
		}
		guest = append(guest, time.Since(start))
		start = time.Now()
		if err := exec.Command("true").Run(); err != nil {
			return err
		}
		local = append(local, time.Since(start))
	}
	p50, p99, l50 := pct(guest, 0.5), pct(guest, 0.99), pct(local, 0.5)
	t.add(fmt.Sprintf("exec `true` round trip (API), p50 / p99 of %d", n), ms(p50)+" / "+ms(p99), "")
	t.add("local fork/exec of `true` on the host, p50", ms(l50), "baseline, same run")
	t.add("exec round trip ÷ local fork/exec (p50)", fmt.Sprintf("%.1f×", float64(p50)/float64(l50)), "")
	return nil
}

func benchFiles(ctx context.Context, c *client.Client, sb client.Sandbox, t *table, _ int) error {
	data := make([]byte, 64<<20)
	rand.Read(data)
	start := time.Now()
	if err := c.WriteFile(ctx, sb.ID, "/root/bench.bin", 0o644, bytes.NewReader(data)); err != nil {
		return err
	}
	w := time.Since(start)
	start = time.Now()
	if err := c.ReadFile(ctx, sb.ID, "/root/bench.bin", io.Discard); err != nil {
		return err
	}
	r := time.Since(start)
	mibs := func(d time.Duration) string { return fmt.Sprintf("%.1f MiB/s", 64/d.Seconds()) }
	t.add("64 MiB file write (API → guest disk, fsynced)", mibs(w), ms(w))
	t.add("64 MiB file read (guest → API)", mibs(r), ms(r))
	return nil
}

func benchIdle(ctx context.Context, c *client.Client, sb client.Sandbox, t *table, _ int) error {
	const window = 10 * time.Second
	time.Sleep(2 * time.Second) // let the last transfer settle
	before, err := cpuTicks(sb.VMPID)
	if err != nil {
		return err
	}
	time.Sleep(window)
	after, err := cpuTicks(sb.VMPID)
	if err != nil {
		return err
	}
	const hz = 100 // USER_HZ
	used := float64(after-before) / hz
	t.add("host CPU of one idle sandbox over 10 s", fmt.Sprintf("%.1f %% of a core", 100*used/window.Seconds()), fmt.Sprintf("%.2f CPU-s", used))
	return nil
}

// cpuTicks is utime+stime of pid in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st, nil
}
