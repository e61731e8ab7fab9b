package vmmtest

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/disk"
	"github.com/agentbox/agentbox/vmm"
)

// BootTimeout bounds a boot to agent-ready in the suite (TCG on a loaded
// 2-core machine is slow; this is a hang guard, not a measurement).
const BootTimeout = 90 * time.Second

// Boot starts a VM from the cached assets with a fresh overlay and returns
// it with a connected agent client. The VM is stopped when the test ends.
func Boot(t testing.TB, d vmm.Driver, id string) (vmm.VM, *agentclient.Client) {
	vm, c, _ := boot(t, d, id, "")
	return vm, c
}

// vmConfig is a test VM's config with a fresh overlay on base.
func vmConfig(t testing.TB, id, base string) vmm.Config {
	t.Helper()
	a := FindAssets(t)
	if base == "" {
		base = a.BaseImage
	}
	dir := ShortTempDir(t)
	overlay := filepath.Join(dir, "root.qcow2")
	if err := disk.CreateOverlay(context.Background(), base, overlay, 0); err != nil {
		t.Fatal(err)
	}
	return vmm.Config{
		ID: id, Dir: dir, Kernel: a.Kernel, Initramfs: a.Initramfs,
		Cmdline: "agentbox.hostname=" + id, VCPUs: 1, MemoryMiB: 256,
		Disks: []vmm.Disk{{Path: overlay}}, ConsoleLog: filepath.Join(dir, "console.log"),
	}
}

// boot starts a VM (restoring snapshot when it is not empty, on a fresh
// overlay over base) and dials its agent.
func boot(t testing.TB, d vmm.Driver, id, snapshot string) (vmm.VM, *agentclient.Client, vmm.Config) {
	t.Helper()
	ctx := context.Background()
	base := ""
	if snapshot != "" {
		base = filepath.Join(snapshot, "disk.qcow2")
	}
	cfg := vmConfig(t, id, base)
	var vm vmm.VM
	var err error
	if snapshot == "" {
		vm, err = d.Start(ctx, cfg)
	} else if vm, err = d.Restore(ctx, cfg, snapshot); err == nil {
		err = vm.Resume(ctx)
	}
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := vm.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	bctx, cancel := context.WithTimeout(ctx, BootTimeout)
	defer cancel()
	conn, err := vm.Dial(bctx, channel.AgentPort)
	if err != nil {
		t.Fatalf("dial agent: %v\nconsole:\n%s", err, readFile(cfg.ConsoleLog))
	}
	c := agentclient.New(conn)
	t.Cleanup(func() { c.Close() })
	return vm, c, cfg
}

// Run checks d's contract on one booted VM.
func Run(t *testing.T, newDriver func(t *testing.T) vmm.Driver) {
	d := newDriver(t)
	vm, c, cfg := boot(t, d, "conformance", "")
	ctx := context.Background()

	t.Run("health", func(t *testing.T) {
		h, err := c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Hostname != "conformance" || h.Kernel == "" {
			t.Errorf("got hostname %q kernel %q, want conformance and a kernel", h.Hostname, h.Kernel)
		}
	})
	t.Run("exec over the channel", func(t *testing.T) { checkExec(t, c) })
	t.Run("concurrent streams", func(t *testing.T) { checkConcurrentDials(t, vm) })
	t.Run("port without listener", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := vm.Dial(dctx, 4099); !errors.Is(err, channel.ErrRefused) {
			t.Errorf("got %v, want ErrRefused", err)
		}
	})
	t.Run("pause and resume", func(t *testing.T) { checkPauseResume(t, vm, c) })
	t.Run("snapshot and restore", func(t *testing.T) { checkSnapshot(t, d, vm, c, cfg) })
	t.Run("stop", func(t *testing.T) { checkStop(t, vm) })
}

func checkExec(t *testing.T, c *agentclient.Client) {
	out := runCmd(t, c, agentclient.Command{Shell: "head -c 8388608 /dev/zero | tr '\\0' x; echo; uname -r >&2"})
	if n := strings.Count(out.stdout, "x"); n != 8<<20 {
		t.Errorf("got %d bytes of output, want %d", n, 8<<20)
	}
	if !strings.Contains(out.stderr, ".") || out.code != 0 {
		t.Errorf("got stderr %q code %d", out.stderr, out.code)
	}
}

type result struct {
	stdout, stderr string
	code           int
}

func runCmd(t testing.TB, c *agentclient.Client, cmd agentclient.Command) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := c.Start(ctx, cmd)
	if err != nil {
		t.Fatalf("start %v: %v", cmd, err)
	}
	var o, e bytes.Buffer
	exit, err := c.Follow(ctx, id, 0, func(out agentclient.Output) error {
		if out.Stderr {
			e.Write(out.Data)
		} else {
			o.Write(out.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	return result{o.String(), e.String(), exit.Code}
}

func checkConcurrentDials(t *testing.T, vm vmm.VM) {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := vm.Dial(ctx, channel.AgentPort)
			if err != nil {
				errs <- err
				return
			}
			c := agentclient.New(conn)
			defer c.Close()
			if _, err := c.Health(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func checkPauseResume(t *testing.T, vm vmm.VM, c *agentclient.Client) {
	ctx := context.Background()
	if err := vm.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := c.Health(hctx)
	cancel()
	if err == nil {
		t.Error("a paused guest answered")
	}
	if err := vm.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if out := runCmd(t, c, agentclient.Command{Argv: []string{"echo", "back"}}); out.stdout != "back\n" {
		t.Errorf("got %q after resume", out.stdout)
	}
}

func checkStop(t *testing.T, vm vmm.VM) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pid := vm.PID()
	if err := vm.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case <-vm.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Stop (kill 0: %v)", pid, err)
	}
	if _, err := vm.Dial(ctx, channel.AgentPort); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("dial after stop: got %v, want ErrNotRunning", err)
	}
	if err := vm.Pause(ctx); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("pause after stop: got %v, want ErrNotRunning", err)
	}
}

func readFile(p string) string {
	b, _ := osReadFile(p)
	return string(b)
}
