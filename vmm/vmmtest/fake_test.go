package vmmtest

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFakeConformance holds the fake to the contract the backends pass.
func TestFakeConformance(t *testing.T) {
	RunContract(t, Target{
		NewDriver: func(*testing.T) vmm.Driver { return NewFakeDriver(FakeOptions{CheckDisks: true}) },
		Config:    FakeConfig,
	})
}

func startFake(t *testing.T, d *FakeDriver, id string) (*FakeVM, *agentclient.Client) {
	t.Helper()
	vm, err := d.Start(context.Background(), FakeConfig(t, id, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vm.Stop(context.Background()) })
	conn, err := vm.Dial(context.Background(), channel.AgentPort)
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.New(conn)
	t.Cleanup(func() { c.Close() })
	return vm.(*FakeVM), c
}

func TestFakeDie(t *testing.T) {
	d := NewFakeDriver(FakeOptions{})
	vm, c := startFake(t, d, "dies")
	// A process that would outlive the VM is killed with it.
	if _, err := c.Start(context.Background(), agentclient.Command{Argv: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	vm.Die(boom)
	select {
	case <-vm.Done():
	default:
		t.Fatal("Done open after Die")
	}
	if err := vm.Wait(context.Background()); !errors.Is(err, boom) {
		t.Errorf("Wait: got %v, want boom", err)
	}
	if _, err := c.Health(context.Background()); err == nil {
		t.Error("the agent of a dead VM answered")
	}
	if _, err := vm.Dial(context.Background(), channel.AgentPort); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("dial: got %v, want ErrNotRunning", err)
	}
	if got := d.Last(); got != vm {
		t.Errorf("Last: got %p, want %p", got, vm)
	}
}

func TestFakeFailNext(t *testing.T) {
	ctx := context.Background()
	d := NewFakeDriver(FakeOptions{})
	boom := errors.New("boom")
	d.FailNextStart(boom)
	if _, err := d.Start(ctx, FakeConfig(t, "a", "")); !errors.Is(err, boom) {
		t.Fatalf("start: got %v, want boom", err)
	}
	vm, _ := startFake(t, d, "b") // only the next one fails
	if d.Starts() != 2 || len(d.VMs()) != 1 {
		t.Errorf("got %d starts and %d vms, want 2 and 1", d.Starts(), len(d.VMs()))
	}
	if err := vm.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	d.FailNextSnapshot(boom)
	dir := ShortTempDir(t)
	if err := vm.Snapshot(ctx, dir); !errors.Is(err, boom) {
		t.Fatalf("snapshot: got %v, want boom", err)
	}
	if err := vm.Snapshot(ctx, dir); err != nil {
		t.Fatal(err)
	}
	d.FailNextRestore(boom)
	if _, err := d.Restore(ctx, FakeConfig(t, "c", ""), dir); !errors.Is(err, boom) {
		t.Fatalf("restore: got %v, want boom", err)
	}
	r, err := d.Restore(ctx, FakeConfig(t, "c", ""), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	fr := r.(*FakeVM)
	if d.Restores() != 2 || !fr.Paused() || fr.RestoredFrom() != dir || fr.Hostname() != "b" {
		t.Errorf("got %d restores, paused %v, from %q, hostname %q", d.Restores(), fr.Paused(), fr.RestoredFrom(), fr.Hostname())
	}
}

func TestFakeDelays(t *testing.T) {
	d := NewFakeDriver(FakeOptions{StartDelay: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Start(ctx, FakeConfig(t, "slow", "")); !errors.Is(err, context.Canceled) {
		t.Fatalf("start: got %v, want context.Canceled", err)
	}
	d.SetStartDelay(0)
	d.SetBootDelay(time.Hour)
	vm, err := d.Start(context.Background(), FakeConfig(t, "booting", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop(context.Background())
	dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer dcancel()
	if _, err := vm.Dial(dctx, channel.AgentPort); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial of a booting guest: got %v, want DeadlineExceeded", err)
	}
}

func TestFakeSystemIsRecorded(t *testing.T) {
	vm, c := startFake(t, NewFakeDriver(FakeOptions{}), "sys")
	ctx := context.Background()
	if err := errors.Join(c.Freeze(ctx), c.Thaw(ctx)); err != nil {
		t.Fatal(err)
	}
	if vm.SystemCalls("Freeze") != 1 || vm.SystemCalls("Thaw") != 1 {
		t.Errorf("got %d freezes and %d thaws", vm.SystemCalls("Freeze"), vm.SystemCalls("Thaw"))
	}
}

func TestFakePortForward(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "hello from the guest")
	}()
	vm, _ := startFake(t, NewFakeDriver(FakeOptions{}), "pf")
	st, err := vm.Dial(context.Background(), channel.PortForwardPort)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	conn, err := channel.OpenTCP(st, l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil || string(b) != "hello from the guest" {
		t.Errorf("got %q, %v", b, err)
	}
}

func TestFakeStopWhilePaused(t *testing.T) {
	vm, c := startFake(t, NewFakeDriver(FakeOptions{}), "paused")
	ctx := context.Background()
	if err := vm.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Health(ctx)
		errc <- err
	}()
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Error("a call blocked by the pause succeeded after Stop")
	}
}
