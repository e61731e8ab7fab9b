package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/qemu"
)

// floors are what QEMU itself does on this machine, measured in the same
// run as the product figures: a bare VM (the same kernel and driver, a
// trivial static init, bareinit) booted, restored and cloned, and a raw
// stream over its agent channel.
type floors struct {
	boot, clone, restore time.Duration
	// inMiBs and outMiBs are the raw channel's throughput (host → guest,
	// guest → host).
	inMiBs, outMiBs float64
	// rtt is a one-byte round trip over the raw channel (p50): what any
	// agent call costs at the least.
	rtt time.Duration
	// guestTrue is the p50 of `true` spawned inside a product guest
	// (guestTrue, in rounds between benchExec's).
	guestTrue time.Duration
	// clonePSS is a bare clone's proportional set size by kind (pssOf),
	// taken once it answered; its private pages outside guest memory are
	// what one more QEMU process costs at the least.
	clonePSS map[string]int64
}

// agentSocket is the QEMU driver's agent channel socket in a VM's dir.
const agentSocket = "agent.sock"

// bareVM is a running bare VM and its channel connection.
type bareVM struct {
	vm   vmm.VM
	dir  string
	conn net.Conn
}

func (b *bareVM) close() {
	if b.conn != nil {
		b.conn.Close()
	}
	_ = b.vm.Stop(context.Background())
}

// measureFloors boots bare VMs (n boots), then restores and clones one.
func measureFloors(ctx context.Context, n int, p *progress) (floors, error) {
	var f floors
	work, err := os.MkdirTemp("", "ab-floor-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(work)
	p.step("floor: building the bare init")
	initrd, err := buildBareInit(ctx, work)
	if err != nil {
		return f, err
	}
	d, err := qemu.New(qemu.Options{Accel: accel(), Logger: slog.New(slog.DiscardHandler), TBSizeMiB: tbSize})
	if err != nil {
		return f, err
	}
	cfg := hostd.Config{}.WithDefaults()
	mk := func(name string) (vmm.Config, error) {
		dir := filepath.Join(work, name)
		return vmm.Config{ID: "floor-" + name, Dir: dir, Kernel: cfg.Kernel, Initramfs: initrd, VCPUs: 1, MemoryMiB: 512,
			ConsoleLog: filepath.Join(dir, "console.log")}, os.MkdirAll(dir, 0o700)
	}
	var boots []time.Duration
	var last *bareVM
	for i := range n {
		p.step(fmt.Sprintf("floor: bare boot %d/%d", i+1, n))
		c, err := mk("boot" + strconv.Itoa(i))
		if err != nil {
			return f, err
		}
		start := time.Now()
		vm, err := d.Start(ctx, c)
		if err != nil {
			return f, err
		}
		b := &bareVM{vm: vm, dir: c.Dir}
		if err := b.ping(ctx); err != nil {
			b.close()
			return f, fmt.Errorf("bare boot: %w", err)
		}
		boots = append(boots, time.Since(start))
		if last != nil {
			last.close()
		}
		last = b
	}
	defer last.close()
	f.boot = pct(boots, 0.5)
	p.step("floor: raw agent-channel stream")
	if f.inMiBs, f.outMiBs, err = last.stream(64 << 20); err != nil {
		return f, err
	}
	p.step("floor: raw agent-channel round trips")
	if f.rtt, err = last.roundTrips(200); err != nil {
		return f, err
	}
	p.step("floor: bare clone and restore")
	if f.clone, f.restore, f.clonePSS, err = restoreFloors(ctx, d, last, mk); err != nil {
		return f, err
	}
	return f, nil
}

// restoreFloors snapshots bare VM b (its memory a file: restores map it
// copy-on-write, the template clone) and measures restores of it; then
// snapshots a clone (its memory in the migration stream) and measures
// restores of that. clonePSS is the last clone's PSS by kind.
func restoreFloors(ctx context.Context, d *qemu.Driver, b *bareVM, mk func(string) (vmm.Config, error)) (clone, restore time.Duration, clonePSS map[string]int64, err error) {
	snap := func(vm vmm.VM, name string) (string, error) {
		dir := filepath.Join(filepath.Dir(b.dir), name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
		if err := vm.Pause(ctx); err != nil {
			return "", err
		}
		return dir, vm.Snapshot(ctx, dir)
	}
	timed := func(from, name string) (time.Duration, *bareVM, error) {
		var ds []time.Duration
		var keep *bareVM
		for i := range 3 {
			c, err := mk(name + strconv.Itoa(i))
			if err != nil {
				return 0, nil, err
			}
			start := time.Now()
			vm, err := d.Restore(ctx, c, from)
			if err != nil {
				return 0, nil, err
			}
			r := &bareVM{vm: vm, dir: c.Dir}
			if err = vm.Resume(ctx); err == nil {
				err = r.ping(ctx)
			}
			if err != nil {
				r.close()
				return 0, nil, err
			}
			ds = append(ds, time.Since(start))
			if keep != nil {
				keep.close()
			}
			keep = r
		}
		return pct(ds, 0.5), keep, nil
	}
	s1, err := snap(b.vm, "snap-file")
	if err != nil {
		return 0, 0, nil, err
	}
	clone, c, err := timed(s1, "clone")
	if err != nil {
		return 0, 0, nil, err
	}
	defer c.close()
	if clonePSS, err = pssOf(c.vm.PID()); err != nil {
		return 0, 0, nil, err
	}
	s2, err := snap(c.vm, "snap-stream")
	if err != nil {
		return 0, 0, nil, err
	}
	restore, r, err := timed(s2, "restore")
	if err != nil {
		return 0, 0, nil, err
	}
	r.close()
	return clone, restore, clonePSS, nil
}

// ping connects b's channel and waits for the init's answer.
func (b *bareVM) ping(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if b.conn == nil {
			c, err := net.Dial("unix", filepath.Join(b.dir, agentSocket))
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			b.conn = c
		}
		if _, err := b.conn.Write([]byte{'p'}); err != nil {
			return err
		}
		_ = b.conn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		var k [1]byte
		if _, err := b.conn.Read(k[:]); err == nil && k[0] == 'k' {
			_ = b.conn.SetReadDeadline(time.Time{})
			return b.drain()
		} else if !errors.Is(err, os.ErrDeadlineExceeded) && err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return errors.New("the bare init did not answer")
}

// drain reads the answers to pings sent before the guest listened.
func (b *bareVM) drain() error {
	time.Sleep(20 * time.Millisecond)
	_ = b.conn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	var junk [256]byte
	for {
		if _, err := b.conn.Read(junk[:]); err != nil {
			_ = b.conn.SetReadDeadline(time.Time{})
			return nil
		}
	}
}

// stream sends and then receives size bytes over the raw channel.
func (b *bareVM) stream(size int64) (in, out float64, err error) {
	hdr := func(op byte) []byte {
		h := make([]byte, 9)
		h[0] = op
		binary.LittleEndian.PutUint64(h[1:], uint64(size))
		return h
	}
	buf := make([]byte, 1<<16)
	start := time.Now()
	if _, err := b.conn.Write(hdr('w')); err != nil {
		return 0, 0, err
	}
	for left := size; left > 0; left -= int64(len(buf)) {
		if _, err := b.conn.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			return 0, 0, err
		}
	}
	if _, err := io.ReadFull(b.conn, buf[:1]); err != nil || buf[0] != 'k' {
		return 0, 0, fmt.Errorf("stream in: %q, %v", buf[:1], err)
	}
	in = float64(size) / (1 << 20) / time.Since(start).Seconds()
	start = time.Now()
	if _, err := b.conn.Write(hdr('r')); err != nil {
		return 0, 0, err
	}
	if _, err := io.CopyN(io.Discard, b.conn, size); err != nil {
		return 0, 0, err
	}
	out = float64(size) / (1 << 20) / time.Since(start).Seconds()
	return in, out, nil
}

// roundTrips is the p50 of n one-byte pings over the raw channel.
func (b *bareVM) roundTrips(n int) (time.Duration, error) {
	d := make([]time.Duration, 0, n)
	var k [1]byte
	for range n {
		start := time.Now()
		if _, err := b.conn.Write([]byte{'p'}); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(b.conn, k[:]); err != nil || k[0] != 'k' {
			return 0, fmt.Errorf("ping: %q, %v", k[:], err)
		}
		d = append(d, time.Since(start))
	}
	return pct(d, 0.5), nil
}

// buildBareInit builds bareinit and packs it with the kernel's modules.
func buildBareInit(ctx context.Context, dir string) (string, error) {
	bin, out := filepath.Join(dir, "bareinit"), filepath.Join(dir, "bare.cpio")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./ci/bench/bareinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build bareinit: %v: %s", err, b)
	}
	pack := exec.CommandContext(ctx, "bash", "images/mkinitramfs.sh", bin, out)
	if b, err := pack.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pack bareinit: %v: %s", err, b)
	}
	return out, nil
}

func accel() vmm.Accel {
	if a := os.Getenv("AGENTBOX_ACCEL"); a != "" {
		return vmm.Accel(a)
	}
	return vmm.AccelTCG
}

// addTo puts the floors into the table (boots: how many bare boots).
func (fl floors) addTo(t *table, boots int) {
	t.dur(fmt.Sprintf("floor: bare boot (same kernel, trivial init) → answers, p50 of %d", boots), fl.boot, "", 0, "", "no agent, network, disk or cgroups")
	t.dur("floor: bare clone (memory file mapped copy-on-write) → answers, p50 of 3", fl.clone, "", 0, "", "")
	t.dur("floor: bare restore (memory in the migration stream) → answers, p50 of 3", fl.restore, "", 0, "", "")
	t.rate("floor: raw agent-channel stream host → guest", fl.inMiBs, "", 0, "", "virtio-serial, 64 MiB")
	t.rate("floor: raw agent-channel stream guest → host", fl.outMiBs, "", 0, "", "virtio-serial, 64 MiB")
	t.dur("floor: raw agent-channel round trip (1 byte), p50 of 200", fl.rtt, "", 0, "", "what any agent call costs at the least")
	for _, k := range []string{pssTCG, pssQEMU} {
		if by, ok := fl.clonePSS[k+privateSuffix]; ok {
			t.figs = append(t.figs, figure{Name: "floor: a bare clone's private memory: " + k, Value: float64(by) / (1 << 20), Unit: "MiB",
				Text: fmt.Sprintf("%.1f MiB", float64(by)/(1<<20)),
				Note: fmt.Sprintf("what one more QEMU process costs at the least (its PSS: %.1f MiB)", float64(fl.clonePSS[k])/(1<<20))})
		}
	}
}
