//go:build vm

package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/hostd/metrics"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/qemu"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// limitEnv is a real manager with VMM cgroups and metrics.
type limitEnv struct {
	m   *sandbox.Manager
	cg  *cgroup.Manager
	met *metrics.Metrics
	// data is the manager's data directory.
	data string
}

func newLimitEnv(t *testing.T, tweaks ...func(*qemu.Options, *sandbox.Options)) *limitEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("VMM cgroups need root")
	}
	data := vmmtest.ShortTempDir(t)
	a := vmmtest.FindAssets(t)
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(data, "hostd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logf, nil))
	cg, err := cgroup.New(fmt.Sprintf("test-%d-%s", os.Getpid(), t.Name()))
	if errors.Is(err, cgroup.ErrUnavailable) {
		t.Skipf("no cgroups: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	qopts := qemu.Options{Accel: vmm.AccelTCG, Logger: log}
	met := metrics.New()
	base, _ := filepath.EvalSymlinks(a.BaseImage)
	sopts := sandbox.Options{Store: st, DataDir: data, Kernel: a.Kernel,
		Initramfs: a.Initramfs, BaseImage: base, DefaultMemoryMiB: 256, Logger: log, Cgroups: cg, Metrics: met}
	for _, tw := range tweaks {
		tw(&qopts, &sopts)
	}
	jailed(&sopts)
	d, err := qemu.New(qopts)
	if err != nil {
		t.Fatal(err)
	}
	sopts.Driver = d
	m, err := sandbox.New(sopts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	met.Watch(m)
	t.Cleanup(func() {
		m.Close(context.Background())
		ids, _ := cg.List()
		for _, id := range ids {
			t.Errorf("cgroup of %s left behind", id)
			_ = cg.Remove(id)
		}
		if err := cg.Close(); err != nil {
			t.Errorf("cgroup parent: %v", err)
		}
		st.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("hostd log:\n%s", b)
		}
		logf.Close()
	})
	return &limitEnv{m: m, cg: cg, met: met, data: data}
}

// run execs script and returns its output and exit code.
func run(t *testing.T, m *sandbox.Manager, id, script string, timeoutS int) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := 0
	err := m.Service().Exec(ctx, id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}, TimeoutS: timeoutS}, func(e sandbox.ExecEvent) error {
		out.Write(e.Data)
		if e.Type == sandbox.EventExit {
			code = e.ExitCode
		}
		return nil
	})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return out.String(), code
}

func TestLimitsInTheGuest(t *testing.T) {
	env := newLimitEnv(t)
	m, ctx := env.m, context.Background()
	const diskMiB = 768
	sb, err := m.Create(ctx, sandbox.CreateOptions{MemoryMiB: 256, Limits: sandbox.Limits{
		CPUQuota: 0.5, HostMemoryMiB: 640, DiskMiB: diskMiB, MaxPids: 64, DiskBps: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(context.Background(), sb.ID) })

	t.Run("the VMM runs in its cgroup with a disk throttle", func(t *testing.T) {
		pids, err := env.cg.Procs(sb.ID)
		if err != nil || len(pids) != 1 || pids[0] != sb.VMPID {
			t.Fatalf("got pids %v, %v in the cgroup, want [%d]", pids, err, sb.VMPID)
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", sb.VMPID))
		if !strings.Contains(string(cmdline), "throttling.bps-total=1073741824") {
			t.Fatalf("got qemu args %q, want a disk throttle", bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	})
	t.Run("memory beyond the guest's fails inside it", func(t *testing.T) {
		out, code := run(t, m, sb.ID, `python3 -c 'b = bytearray(1 << 30); print("allocated")'`, 0)
		if code == 0 || strings.Contains(out, "allocated") {
			t.Fatalf("got exit %d, %q, want a failure", code, out)
		}
		if out, _ := run(t, m, sb.ID, "echo alive", 0); out != "alive\n" {
			t.Fatalf("got %q after the allocation, want alive", out)
		}
		u, err := m.Usage(ctx, sb.ID)
		if err != nil || u.MemoryPeakBytes == 0 || u.MemoryPeakBytes > 640<<20 {
			t.Fatalf("got peak %d, %v, want 0 < peak <= the 640 MiB cap", u.MemoryPeakBytes, err)
		}
	})
	t.Run("a fork bomb hits the pids limit", func(t *testing.T) {
		out, _ := run(t, m, sb.ID, `bash -c 'b() { b | b & }; b; sleep 30' 2>&1`, 8)
		if !strings.Contains(out, "Resource temporarily unavailable") {
			t.Fatalf("got %q, want fork failures", out)
		}
		if out, _ := run(t, m, sb.ID, "echo alive; cat /sys/fs/cgroup/agentbox-exec/pids.max", 0); out != "alive\n64\n" {
			t.Fatalf("got %q after the bomb, want alive and 64", out)
		}
	})
	t.Run("filling the disk gives ENOSPC", func(t *testing.T) {
		// Not zeros: QEMU would turn those into unallocated clusters.
		out, code := run(t, m, sb.ID, "yes agentbox | dd of=/root/fill bs=1M iflag=fullblock 2>&1; sync", 0)
		if code != 0 && !strings.Contains(out, "No space left on device") {
			t.Fatalf("got exit %d, %q", code, out)
		}
		if !strings.Contains(out, "No space left on device") {
			t.Fatalf("got %q, want ENOSPC", out)
		}
		u, err := m.Usage(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if u.DiskUsedBytes < 100<<20 {
			t.Fatalf("overlay takes only %d bytes after filling the disk: the data did not reach it", u.DiskUsedBytes)
		}
		if u.DiskUsedBytes > diskMiB<<20 {
			t.Fatalf("overlay takes %d bytes on the host, want at most the %d MiB limit", u.DiskUsedBytes, diskMiB)
		}
		var fs syscall.Statfs_t
		if err := syscall.Statfs(os.TempDir(), &fs); err != nil || int64(fs.Bavail)*fs.Bsize < diskMiB<<20 {
			t.Fatalf("host free space %d, %v: want above %d MiB", int64(fs.Bavail)*fs.Bsize, err, diskMiB)
		}
		t.Logf("disk: overlay %d MiB on the host after filling a %d MiB limit", u.DiskUsedBytes>>20, diskMiB)
		if out, code := run(t, m, sb.ID, "rm /root/fill && echo freed", 0); code != 0 {
			t.Fatalf("got %d, %q", code, out)
		}
	})
	t.Run("the 0.5 CPU quota is the VMM cgroup's, and usage is counted", func(t *testing.T) {
		if env.cg.Version() == 2 {
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", env.cg.Parent(), sb.ID, "cpu.max"))
			if err != nil || strings.TrimSpace(string(b)) != "50000 100000" {
				t.Fatalf("cpu.max: got %q, %v, want 50000 100000", b, err)
			}
		}
		u0, err := m.Usage(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		run(t, m, sb.ID, "timeout 3 sh -c 'while :; do :; done'", 0)
		wall := time.Since(t0).Seconds()
		u1, err := m.Usage(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		// The rate is the kernel's business, and a figure for make bench;
		// here it is only logged.
		t.Logf("cpu: %.2f CPUs over %.1fs under a 0.5 quota", (u1.CPUSeconds-u0.CPUSeconds)/wall, wall)
		if u1.CPUSeconds <= u0.CPUSeconds {
			t.Fatalf("cpu seconds: got %.2f then %.2f, want them counted", u0.CPUSeconds, u1.CPUSeconds)
		}
		if u1.BytesIn == 0 || u1.BytesOut == 0 {
			t.Fatalf("got %d bytes in, %d out, want both counted", u1.BytesIn, u1.BytesOut)
		}
	})
	t.Run("an exec timeout kills the command", func(t *testing.T) {
		out, code := run(t, m, sb.ID, "sleep 60; echo finished", 2)
		if code != -1 || strings.Contains(out, "finished") {
			t.Fatalf("got exit %d, %q, want killed", code, out)
		}
	})
	t.Run("a disk limit below what the root holds is the caller's error", func(t *testing.T) {
		_, err := m.Create(ctx, sandbox.CreateOptions{MemoryMiB: 256, Limits: sandbox.Limits{DiskMiB: 16}})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "already holds") {
			t.Fatalf("got %v, want ErrInvalid naming the space in use", err)
		}
	})
}

func TestLifecycleIdleTTL(t *testing.T) {
	env := newLimitEnv(t)
	m, ctx := env.m, context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{TimeoutS: 3600, Limits: sandbox.Limits{IdleTimeoutS: 3, OnTimeout: sandbox.OnTimeoutPause}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(context.Background(), sb.ID) })
	run(t, m, sb.ID, "echo kept > /root/state", 0)

	t.Run("metrics parse as Prometheus text", func(t *testing.T) {
		fams := scrape(t, env.met)
		for _, name := range []string{"agentbox_sandboxes", "agentbox_operation_duration_seconds", "agentbox_vmm_memory_bytes", "agentbox_vmm_cpu_seconds_total"} {
			if fams[name] == nil {
				t.Errorf("metric %s missing", name)
			}
		}
	})
	t.Run("idle pauses, and an exec resumes with files intact", func(t *testing.T) {
		waitState(t, m, sb.ID, sandbox.StatePaused)
		if ids, _ := env.cg.List(); len(ids) != 0 {
			t.Fatalf("got cgroups %v while paused, want none", ids)
		}
		out, _ := run(t, m, sb.ID, "cat /root/state", 0)
		if out != "kept\n" {
			t.Fatalf("got %q, want kept", out)
		}
		if info, _ := m.Get(ctx, sb.ID); info.State != sandbox.StateRunning {
			t.Fatalf("got state %s, want running", info.State)
		}
	})
	t.Run("on_timeout pause pauses at the (extended) timeout", func(t *testing.T) {
		// A running exec keeps the sandbox from counting as idle, so only
		// the timeout can pause it.
		started := make(chan struct{})
		go func() {
			_ = m.Service().Exec(context.Background(), sb.ID, sandbox.ExecRequest{Cmd: []string{"sleep", "60"}}, func(e sandbox.ExecEvent) error {
				if e.Type == sandbox.EventStart {
					close(started)
				}
				return nil
			})
		}()
		<-started
		info, err := m.ExtendTimeout(ctx, sb.ID, 1)
		if err != nil || info.Deadline.IsZero() {
			t.Fatalf("got %v, %v, want a deadline", info.Deadline, err)
		}
		waitState(t, m, sb.ID, sandbox.StatePaused)
	})
	t.Run("a timeout deletes, leaving nothing behind", func(t *testing.T) {
		eph, err := m.Create(ctx, sandbox.CreateOptions{TimeoutS: 2})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, err := m.Get(ctx, eph.ID)
			if errors.Is(err, sandbox.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox %s still there: %v", eph.ID, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		ids, _ := env.cg.List()
		for _, id := range ids {
			if id == eph.ID {
				t.Fatalf("cgroup of deleted %s left behind", eph.ID)
			}
		}
		if _, err := os.Stat(filepath.Join(env.data, "sandboxes", eph.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("got %v for the deleted sandbox's dir, want it gone", err)
		}
	})
}

func waitState(t *testing.T, m *sandbox.Manager, id string, want sandbox.State) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		info, err := m.Get(context.Background(), id)
		if err == nil && info.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: got %s, %v, want %s", id, info.State, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func scrape(t *testing.T, met *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	met.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, rec.Body.String())
	}
	return fams
}

func TestReaperRemovesOrphans(t *testing.T) {
	env := newLimitEnv(t)
	g, err := env.cg.Create("sb-orphan", cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = g.Delete() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	env.m.ReapOnce(context.Background())
	if err := cmd.Wait(); err == nil {
		t.Fatal("got a clean exit, want the orphan killed")
	}
	if ids, _ := env.cg.List(); len(ids) != 0 {
		t.Fatalf("got cgroups %v, want none", ids)
	}
}

func TestVMMRunsUnprivileged(t *testing.T) {
	// One user for every VMM (--vmm-user nobody); the default, a uid per
	// sandbox, is TestVMMUserPerSandbox's.
	env := newLimitEnv(t, func(q *qemu.Options, s *sandbox.Options) {
		s.VMMOwner = &sandbox.Owner{UID: 65534, GID: 65534}
	})
	m, ctx := env.m, context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(context.Background(), sb.ID) })
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", sb.VMPID))
	if !strings.Contains(string(status), "Uid:\t65534\t65534\t65534\t65534") {
		t.Fatalf("qemu's status: %s, want uid 65534", status)
	}
	run(t, m, sb.ID, "echo before > /root/f", 0)
	// A snapshot makes QEMU open a new overlay after it dropped privileges.
	forks, err := m.Fork(ctx, sb.ID, sandbox.ForkOptions{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(context.Background(), forks[0].ID) })
	if out, _ := run(t, m, sb.ID, "echo after >> /root/f; cat /root/f", 0); out != "before\nafter\n" {
		t.Fatalf("got %q after the snapshot, want before and after", out)
	}
	if out, _ := run(t, m, forks[0].ID, "cat /root/f", 0); out != "before\n" {
		t.Fatalf("fork: got %q, want before", out)
	}
	if _, err := m.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, m, sb.ID, "cat /root/f", 0); out != "before\nafter\n" {
		t.Fatalf("after pause and auto-resume: got %q", out)
	}
}
