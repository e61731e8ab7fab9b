package vmmtest

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
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
	vm, c, _ := boot(t, Target{Config: vmConfig}, d, id, "")
	return vm, c
}

// vmConfig is a test VM's config with a fresh overlay on base (the cached
// base image when base is empty).
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

// boot starts a VM of tgt (restoring snapshot when it is not empty, on a
// fresh overlay over the snapshot's disk) and dials its agent. It checks
// that Started was called once, with the VM's pid, before Start returned.
func boot(t testing.TB, tgt Target, d vmm.Driver, id, snapshot string) (vmm.VM, *agentclient.Client, vmm.Config) {
	t.Helper()
	launch := func(ctx context.Context, cfg vmm.Config) (vmm.VM, error) {
		if snapshot == "" {
			return d.Start(ctx, cfg)
		}
		return d.Restore(ctx, cfg, snapshot)
	}
	return bootWith(t, tgt, id, snapshot, launch)
}

// bootWith is boot with launch in the place of the driver's Start or
// Restore.
func bootWith(t testing.TB, tgt Target, id, snapshot string, launch func(context.Context, vmm.Config) (vmm.VM, error)) (vmm.VM, *agentclient.Client, vmm.Config) {
	t.Helper()
	ctx := context.Background()
	base := ""
	if snapshot != "" {
		base = filepath.Join(snapshot, "disk.qcow2")
	}
	cfg := tgt.Config(t, id, base)
	var started []int
	var mu sync.Mutex
	cfg.Started = func(pid int) error {
		mu.Lock()
		defer mu.Unlock()
		started = append(started, pid)
		return nil
	}
	vm, err := launch(ctx, cfg)
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
	mu.Lock()
	if len(started) != 1 || started[0] != vm.PID() {
		t.Errorf("%s: Started called with %v before Start returned, want once with pid %d", id, started, vm.PID())
	}
	mu.Unlock()
	if snapshot != "" {
		checkRestoredPaused(t, vm)
		if err := vm.Resume(ctx); err != nil {
			t.Fatalf("resume %s: %v", id, err)
		}
	}
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

// checkRestoredPaused checks that a restored VM's guest does not answer
// before Resume: a Dial, or a call on it, does not complete in a short time.
func checkRestoredPaused(t testing.TB, vm vmm.VM) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	conn, err := vm.Dial(ctx, channel.AgentPort)
	if err != nil {
		return
	}
	c := agentclient.New(conn)
	defer c.Close()
	if _, err := c.Health(ctx); err == nil {
		t.Error("a restored VM answered before Resume")
	}
}

// Run checks d's contract on VMs booted from the cached guest assets, with
// the checks that need a real guest (its files and processes across a
// snapshot). Callers are tests tagged vm.
func Run(t *testing.T, newDriver func(t *testing.T) vmm.Driver) {
	RunContract(t, Target{NewDriver: newDriver, Config: vmConfig, RealGuest: true})
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

func readFile(p string) string {
	b, _ := osReadFile(p)
	return string(b)
}
