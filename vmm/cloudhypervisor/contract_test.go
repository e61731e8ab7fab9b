package cloudhypervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// The TestContract tests run the driver against the fake cloud-hypervisor of
// fakech_test.go: they prove that what we send matches the pinned spec and
// that we handle what the spec says CH answers. They do not prove how a real
// cloud-hypervisor behaves; vmm/cloudhypervisor/realch does, where one runs.

// testVMConfig makes a VM config whose files exist: a kernel, an initramfs
// and a qcow2 overlay on a base image, all under root.
func testVMConfig(t *testing.T, root, name string) vmm.Config {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(root, "base.qcow2")
	if _, err := os.Stat(base); err != nil {
		writeQcow2(t, base, qcowSpec{})
		for _, f := range []string{"vmlinux", "initramfs.cpio"} {
			if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	overlay := writeQcow2(t, filepath.Join(dir, "overlay.qcow2"), qcowSpec{backing: base, backingFormat: "qcow2"})
	return vmm.Config{
		ID: name, Dir: dir,
		Kernel: filepath.Join(root, "vmlinux"), Initramfs: filepath.Join(root, "initramfs.cpio"),
		Cmdline: "quiet", VCPUs: 1, MemoryMiB: 256,
		Disks:      []vmm.Disk{{Path: overlay}},
		ConsoleLog: filepath.Join(dir, "console.log"),
	}
}

func stopVM(t *testing.T, v vmm.VM) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// echo dials port through v and checks that a message comes back.
func echo(t *testing.T, v vmm.VM, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := v.Dial(ctx, channel.AgentPort)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo: got %q, %v; want %q", got, err, msg)
	}
}

func TestContractDriverLifecycle(t *testing.T) {
	d, records := fakeDriver(t)
	root := realDir(t, t.TempDir())
	cfg := testVMConfig(t, root, "sb1")
	ctx := context.Background()

	vm, err := d.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, vm, "hello before snapshot")
	if err := vm.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(root, "snap")
	if err := os.Mkdir(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vm.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if err := checkMarker(snap); err != nil {
		t.Fatal(err)
	}

	// Restore while the first VM still runs: the restored VM must use paths
	// of its own, or its vsock socket would collide.
	cfg2 := testVMConfig(t, root, "sb2")
	vm2, err := d.Restore(ctx, cfg2, snap)
	if err != nil {
		t.Fatal(err)
	}
	checkRestoredDir(t, cfg2, snap)
	if err := vm2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	echo(t, vm2, "hello after restore")
	if err := vm.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	echo(t, vm, "hello after resume")

	info, err := vm2.(*VM).Info(ctx)
	if err != nil || info.State != chapi.VmStateRunning {
		t.Errorf("Info: got %v, %v; want state Running", info.State, err)
	}
	counters, err := vm.(*VM).Counters(ctx)
	if err != nil || counters["disk0"] == nil {
		t.Errorf("Counters: got %v, %v", counters, err)
	}

	for _, v := range []vmm.VM{vm, vm2} {
		stopVM(t, v)
		if err := v.Wait(ctx); err != nil {
			t.Errorf("Wait after a clean stop: %v", err)
		}
		if err := v.Stop(ctx); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		if _, err := v.Dial(ctx, channel.AgentPort); !errors.Is(err, vmm.ErrNotRunning) {
			t.Errorf("Dial after Stop: got %v, want vmm.ErrNotRunning", err)
		}
		if err := v.Pause(ctx); !errors.Is(err, vmm.ErrNotRunning) {
			t.Errorf("Pause after Stop: got %v, want vmm.ErrNotRunning", err)
		}
	}
	for _, c := range []vmm.Config{cfg, cfg2} {
		p := pathsFor(c.Dir)
		for _, f := range []string{p.api, p.vsock, p.restore, p.staging} {
			if _, err := os.Stat(f); !os.IsNotExist(err) {
				t.Errorf("%s left behind after Stop", f)
			}
		}
		if _, err := os.Stat(p.events); err != nil {
			t.Errorf("event monitor file: %v", err)
		}
	}
	checkRequests(t, d, readRecords(t, records), cfg, cfg2)
}

// checkRestoredDir checks the restored VM's own copy of the snapshot.
func checkRestoredDir(t *testing.T, cfg vmm.Config, snap string) {
	t.Helper()
	p := pathsFor(cfg.Dir)
	a, _ := os.Stat(filepath.Join(snap, memoryFile))
	b, _ := os.Stat(filepath.Join(p.restore, memoryFile))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("memory-ranges of the restored VM is not a hard link of the snapshot's")
	}
	raw, err := os.ReadFile(filepath.Join(p.restore, configFile))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		chapi.VmConfig
		Unknown json.RawMessage `json:"fake_unknown_field"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Vsock == nil || got.Vsock.Socket != p.vsock {
		t.Errorf("vsock socket: got %+v, want %s", got.Vsock, p.vsock)
	}
	if got.Disks == nil || len(*got.Disks) != 1 || deref((*got.Disks)[0].Path) != cfg.Disks[0].Path {
		t.Errorf("disks: got %+v, want %s", got.Disks, cfg.Disks[0].Path)
	}
	if got.Serial == nil || deref(got.Serial.File) != cfg.ConsoleLog {
		t.Errorf("serial: got %+v, want %s", got.Serial, cfg.ConsoleLog)
	}
	var unknown bytes.Buffer
	if err := json.Compact(&unknown, got.Unknown); err != nil || unknown.String() != `{"kept":true}` {
		t.Errorf("a field unknown to the spec was lost: got %s", got.Unknown)
	}
}

// checkRequests checks the order and the bodies of what the driver sent.
func checkRequests(t *testing.T, d *Driver, rs []fakeRecord, cfg, cfg2 vmm.Config) {
	t.Helper()
	pids := map[int][]string{}
	var order []int
	for _, r := range rs {
		if r.Endpoint == "vmm.ping" {
			continue // polled until the socket answers
		}
		if _, ok := pids[r.PID]; !ok {
			order = append(order, r.PID)
		}
		pids[r.PID] = append(pids[r.PID], r.Endpoint)
	}
	want := [][]string{
		{"argv", "vm.create", "vm.boot", "vm.pause", "vm.snapshot", "vm.resume", "vm.counters", "vm.shutdown", "vmm.shutdown"},
		{"argv", "vm.restore", "vm.resume", "vm.info", "vm.shutdown", "vmm.shutdown"},
	}
	if len(order) != 2 {
		t.Fatalf("got requests from %d processes, want 2: %v", len(order), pids)
	}
	for i, pid := range order {
		if !slices.Equal(pids[pid], want[i]) {
			t.Errorf("VM %d: got requests %v, want %v", i+1, pids[pid], want[i])
		}
	}
	checkCreateBody(t, d, recordsOf(rs, "vm.create")[0].Body, cfg)

	var rc restoreConfig
	if err := json.Unmarshal(recordsOf(rs, "vm.restore")[0].Body, &rc); err != nil {
		t.Fatal(err)
	}
	if want := "file://" + pathsFor(cfg2.Dir).restore; rc.SourceUrl != want {
		t.Errorf("restore source_url: got %s, want %s", rc.SourceUrl, want)
	}
	if rc.MemoryRestoreMode == nil || *rc.MemoryRestoreMode != d.restoreMode {
		t.Errorf("memory_restore_mode: got %v, want %s", rc.MemoryRestoreMode, d.restoreMode)
	}
	if rc.Resume != nil && *rc.Resume {
		t.Errorf("restore asked to resume; Restore must return a paused VM")
	}
	var snap chapi.VmSnapshotConfig
	_ = json.Unmarshal(recordsOf(rs, "vm.snapshot")[0].Body, &snap)
	if want := "file://" + pathsFor(cfg.Dir).staging; deref(snap.DestinationUrl) != want {
		t.Errorf("snapshot destination_url: got %s, want %s (inside the VM's dir, for Landlock)", deref(snap.DestinationUrl), want)
	}
}

// checkCreateBody checks the vm.create body against cfg.
func checkCreateBody(t *testing.T, d *Driver, body []byte, cfg vmm.Config) {
	t.Helper()
	var vc chapi.VmConfig
	if err := json.Unmarshal(body, &vc); err != nil {
		t.Fatal(err)
	}
	p := pathsFor(cfg.Dir)
	check := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("vm.create %s: got %v, want %v", what, got, want)
		}
	}
	check("kernel", deref(vc.Payload.Kernel), cfg.Kernel)
	check("initramfs", deref(vc.Payload.Initramfs), cfg.Initramfs)
	check("cmdline", deref(vc.Payload.Cmdline), baseCmdline+" quiet")
	check("boot_vcpus", vc.Cpus.BootVcpus, 1)
	check("max_vcpus", vc.Cpus.MaxVcpus, 1)
	check("memory", vc.Memory.Size, int64(256<<20))
	check("vsock socket", vc.Vsock.Socket, p.vsock)
	check("vsock cid", vc.Vsock.Cid, int64(guestCID))
	check("serial mode", vc.Serial.Mode, chapi.ConsoleModeFile)
	check("serial file", deref(vc.Serial.File), cfg.ConsoleLog)
	check("console mode", vc.Console.Mode, chapi.ConsoleModeOff)
	disk := (*vc.Disks)[0]
	check("disk path", deref(disk.Path), cfg.Disks[0].Path)
	check("disk image_type", *disk.ImageType, chapi.ImageTypeQcow2)
	check("disk backing_files", *disk.BackingFiles, true)
	check("disk id", deref(disk.Id), "disk0")
	check("disk serial", deref(disk.Serial), "agentbox-disk0")
	check("disk readonly", *disk.Readonly, false)
	if !d.landlock {
		if vc.LandlockEnable != nil && *vc.LandlockEnable {
			t.Errorf("vm.create enables Landlock on a host without it")
		}
		return
	}
	wantRules := []chapi.LandlockConfig{{Path: cfg.Dir, Access: "rw"}, {Path: filepath.Join(filepath.Dir(cfg.Dir), "base.qcow2"), Access: "r"}}
	if vc.LandlockEnable == nil || !*vc.LandlockEnable || vc.LandlockRules == nil || !slices.Equal(*vc.LandlockRules, wantRules) {
		t.Errorf("vm.create Landlock: got %v %v, want enabled with %v", vc.LandlockEnable, vc.LandlockRules, wantRules)
	}
}

func TestContractStartBootFails(t *testing.T) {
	d, records := fakeDriver(t, envFakeFailOn+"=vm.boot=404")
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "sb")
	_, err := d.Start(context.Background(), cfg)
	var apiErr *APIError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &apiErr) || apiErr.Endpoint != "vm.boot" {
		t.Fatalf("got %v, want an *APIError of vm.boot wrapping ErrNotFound", err)
	}
	rs := readRecords(t, records)
	if len(rs) == 0 {
		t.Fatal("no records")
	}
	if err := syscall.Kill(rs[0].PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the VMM of a failed start is still there: kill(%d, 0) = %v", rs[0].PID, err)
	}
	if _, err := os.Stat(pathsFor(cfg.Dir).api); !os.IsNotExist(err) {
		t.Errorf("API socket left behind after a failed start")
	}
}

func TestContractStartVMMExits(t *testing.T) {
	d, _ := fakeDriver(t, envFakeMode+"=exit")
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "sb")
	_, err := d.Start(context.Background(), cfg)
	if !errors.Is(err, vmm.ErrNotRunning) || !strings.Contains(err.Error(), "exiting as told") {
		t.Fatalf("got %v, want vmm.ErrNotRunning quoting the VMM's log", err)
	}
}

func TestContractStopEscalates(t *testing.T) {
	d, _ := fakeDriver(t, envFakeMode+"=stubborn")
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "sb")
	vm, err := d.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The fake answers vmm.shutdown without exiting and ignores SIGTERM:
	// only SIGKILL ends it, and Stop must get there within its ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := vm.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-vm.Done():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	var exitErr *exec.ExitError
	if err := vm.Wait(context.Background()); !errors.As(err, &exitErr) {
		t.Fatalf("Wait: got %v, want the SIGKILL exit", err)
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("exit: got %v, want killed by SIGKILL", exitErr)
	}
}

func TestContractProcessDies(t *testing.T) {
	d, _ := fakeDriver(t)
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "sb")
	vm, err := d.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(vm.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := vm.Wait(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: got %v, want the kill's exit error", err)
	}
	if _, err := vm.Dial(ctx, channel.AgentPort); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("Dial: got %v, want vmm.ErrNotRunning", err)
	}
	if err := vm.Resume(ctx); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("Resume: got %v, want vmm.ErrNotRunning", err)
	}
	if err := vm.Stop(ctx); err != nil {
		t.Errorf("Stop of a dead VM: %v", err)
	}
}

func TestContractRestoreRefusesOtherBackends(t *testing.T) {
	d, _ := fakeDriver(t)
	root := realDir(t, t.TempDir())
	cfg := testVMConfig(t, root, "sb")
	snap := filepath.Join(root, "qemu-snap")
	if err := os.Mkdir(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snap, markerFile), []byte("qemu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := d.Restore(context.Background(), cfg, snap)
	if !errors.Is(err, vmm.ErrUnsupported) || !strings.Contains(err.Error(), `"qemu"`) {
		t.Fatalf("got %v, want vmm.ErrUnsupported naming the qemu backend", err)
	}
}

func TestContractStartChecksChain(t *testing.T) {
	d, records := fakeDriver(t)
	cfg := testVMConfig(t, realDir(t, t.TempDir()), "sb")
	writeQcow2(t, cfg.Disks[0].Path, qcowSpec{backing: "/etc/passwd"}) // outside the data dirs
	if _, err := d.Start(context.Background(), cfg); !errors.Is(err, vmm.ErrInvalidConfig) || !errors.Is(err, ErrBadImageChain) {
		t.Fatalf("got %v, want vmm.ErrInvalidConfig and ErrBadImageChain", err)
	}
	if rs := readRecords(t, records); len(rs) != 0 {
		t.Errorf("a VMM was started for a bad chain: %v", rs)
	}
}

// TestContractDriverNets covers a VM with a tap added by VM.AddNet, and the
// restore of its snapshot with a new tap for that device.
func TestContractDriverNets(t *testing.T) {
	d, records := fakeDriver(t)
	root := realDir(t, t.TempDir())
	ctx := context.Background()
	vm, err := d.Start(ctx, testVMConfig(t, root, "sb1"))
	if err != nil {
		t.Fatal(err)
	}
	defer stopVM(t, vm)
	if err := vm.(*VM).AddNet(ctx, "net0", "52:54:00:00:00:01", tapFile(t, "tap-first")); err != nil {
		t.Fatal(err)
	}
	if err := vm.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(root, "snap")
	if err := os.Mkdir(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vm.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	nets := []NetFiles{{ID: "net0", Files: []*os.File{tapFile(t, "tap-restored")}}}
	vm2, err := d.RestoreWithNets(ctx, testVMConfig(t, root, "sb2"), snap, nets)
	if err != nil {
		t.Fatal(err)
	}
	defer stopVM(t, vm2)
	rs := readRecords(t, records)
	if add := recordsOf(rs, "vm.add-net"); len(add) != 1 || !slices.Equal(add[0].FDData, []string{"tap-first"}) {
		t.Errorf("vm.add-net: got %+v", add)
	}
	restore := recordsOf(rs, "vm.restore")
	if len(restore) != 1 || !slices.Equal(restore[0].FDData, []string{"tap-restored"}) {
		t.Fatalf("vm.restore: got %+v", restore)
	}
	var rc restoreConfig
	if err := json.Unmarshal(restore[0].Body, &rc); err != nil || !slices.Equal(rc.NetFDs, []restoredNet{{ID: "net0", NumFDs: 1}}) {
		t.Errorf("net_fds: got %+v, %v", rc.NetFDs, err)
	}
}

// TestContractDialWaitsForGuest: CH closes a stream the guest does not
// answer, whether the port has no listener or the guest is still booting.
// Until the guest has answered once, Dial retries; afterwards it refuses.
func TestContractDialWaitsForGuest(t *testing.T) {
	d, _ := fakeDriver(t, envFakeUpIn+"=400ms")
	vm, err := d.Start(context.Background(), testVMConfig(t, realDir(t, t.TempDir()), "sb"))
	if err != nil {
		t.Fatal(err)
	}
	defer stopVM(t, vm)

	early, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := vm.Dial(early, channel.AgentPort); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial before the guest is up, with a short ctx: got %v, want DeadlineExceeded", err)
	}
	echo(t, vm, "first answer") // retries until the guest answers

	// A refusal is not retried: Dial returns it, not the ctx's deadline.
	ctx, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if _, err := vm.Dial(ctx, 4099); !errors.Is(err, channel.ErrRefused) || ctx.Err() != nil {
		t.Fatalf("Dial to a port without a listener: got %v (ctx %v), want channel.ErrRefused", err, ctx.Err())
	}
}

// TestContractConfigNet covers vmm.Config.Net: the tap goes in with
// vm.add-net between vm.create and vm.boot, with BpsTotal as its rate
// limiter, and a restore passes the new tap as the snapshot's net0 and
// replaces the snapshot's limiter with its own config's.
// TestContractConfigNet also checks the NIC's and the disk's rate limiters,
// at boot and as rewritten for a restore.
func TestContractConfigNet(t *testing.T) {
	d, records := fakeDriver(t)
	root := realDir(t, t.TempDir())
	ctx := context.Background()
	cfg := testVMConfig(t, root, "sb1")
	cfg.Net = &vmm.Net{Tap: tapFile(t, "tap-boot"), MAC: "52:54:00:00:00:02", BpsTotal: 10 << 20}
	cfg.Disks[0].BpsTotal = 10 << 20
	vm, err := d.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopVM(t, vm)
	if err := vm.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(root, "snap")
	if err := os.Mkdir(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vm.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	cfg2 := testVMConfig(t, root, "sb2")
	cfg2.Net = &vmm.Net{Tap: tapFile(t, "tap-restore"), MAC: "52:54:00:00:00:02", BpsTotal: 8 << 10}
	cfg2.Disks[0].BpsTotal = 8 << 10
	vm2, err := d.Restore(ctx, cfg2, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer stopVM(t, vm2)
	rs := readRecords(t, records)
	var order []string
	for _, r := range rs {
		if r.Endpoint == "vm.create" || r.Endpoint == "vm.add-net" || r.Endpoint == "vm.boot" {
			order = append(order, r.Endpoint)
		}
	}
	if !slices.Equal(order, []string{"vm.create", "vm.add-net", "vm.boot"}) {
		t.Errorf("got %v, want the tap added between create and boot", order)
	}
	if add := recordsOf(rs, "vm.add-net"); len(add) != 1 || !slices.Equal(add[0].FDData, []string{"tap-boot"}) {
		t.Errorf("vm.add-net: got %+v", add)
	}
	if restore := recordsOf(rs, "vm.restore"); len(restore) != 1 || !slices.Equal(restore[0].FDData, []string{"tap-restore"}) {
		t.Errorf("vm.restore: got %+v", restore)
	}
	// 10 MiB/s: a 1 MiB bucket refilled every 100 ms.
	if add := recordsOf(rs, "vm.add-net"); len(add) == 1 {
		var nc chapi.NetConfig
		_ = json.Unmarshal(add[0].Body, &nc)
		want := chapi.TokenBucket{Size: 1 << 20, RefillTime: 100}
		if nc.RateLimiterConfig == nil || nc.RateLimiterConfig.Bandwidth == nil || *nc.RateLimiterConfig.Bandwidth != want {
			t.Errorf("vm.add-net rate_limiter_config: got %s, want bandwidth %+v", add[0].Body, want)
		}
	}
	if create := recordsOf(rs, "vm.create"); len(create) == 1 {
		var vc chapi.VmConfig
		_ = json.Unmarshal(create[0].Body, &vc)
		want := chapi.TokenBucket{Size: 1 << 20, RefillTime: 100}
		if vc.Disks == nil || len(*vc.Disks) != 1 || !hasBandwidth((*vc.Disks)[0].RateLimiterConfig, want) {
			t.Errorf("vm.create disks: got %s, want bandwidth %+v", create[0].Body, want)
		}
	}
	// 8 KiB/s: the 64 KiB minimum bucket, refilled in 8 s.
	raw, err := os.ReadFile(filepath.Join(cfg2.Dir, "restored-snapshot", configFile))
	if err != nil {
		t.Fatal(err)
	}
	var restored struct {
		Net   []chapi.NetConfig  `json:"net"`
		Disks []chapi.DiskConfig `json:"disks"`
	}
	_ = json.Unmarshal(raw, &restored)
	want := chapi.TokenBucket{Size: 64 << 10, RefillTime: 8000}
	if len(restored.Net) != 1 || !hasBandwidth(restored.Net[0].RateLimiterConfig, want) {
		t.Errorf("restored config.json net: got %+v, want bandwidth %+v", restored.Net, want)
	}
	if len(restored.Disks) != 1 || !hasBandwidth(restored.Disks[0].RateLimiterConfig, want) {
		t.Errorf("restored config.json disks: got %+v, want bandwidth %+v", restored.Disks, want)
	}
}

func hasBandwidth(rl *chapi.RateLimiterConfig, want chapi.TokenBucket) bool {
	return rl != nil && rl.Bandwidth != nil && *rl.Bandwidth == want
}
