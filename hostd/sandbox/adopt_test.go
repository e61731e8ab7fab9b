package sandbox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

// TestReleaseAndReadopt: a manager that Releases leaves its sandboxes
// running; the next manager on the same data directory re-adopts each whose
// VMM still runs (an exec session started before goes on, and a client
// re-attaching at offset 0 gets all of its output), and marks failed, with
// the reason and its files kept, one whose VMM died meanwhile.
func TestReleaseAndReadopt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	info := e.create(CreateOptions{})
	gone := e.create(CreateOptions{})
	execID, err := e.svc.Execs.StartExec(ctx, info.ID, ExecRequest{Cmd: []string{"sh", "-c", "echo one; sleep 1; echo two"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	for _, vm := range e.d.VMs() {
		if vm.Config().ID == gone.ID {
			vm.Die(nil) // the VMM dies while no hostd runs
		}
	}
	m2, err := New(e.m.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m2.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := m2.Get(ctx, info.ID); got.State != StateRunning {
		t.Fatalf("released sandbox after the restart: got %s (%s), want running", got.State, got.Error)
	}
	got, _ := m2.Get(ctx, gone.ID)
	if got.State != StateFailed || !strings.Contains(got.Error, "gone") {
		t.Errorf("sandbox whose vm died: got %s %q, want failed saying the vm is gone", got.State, got.Error)
	}
	svc := m2.Service()
	var out bytes.Buffer
	err = svc.Execs.Attach(ctx, info.ID, execID, 0, func(ev ExecEvent) error { out.Write(ev.Data); return nil })
	if err != nil || out.String() != "one\ntwo\n" {
		t.Errorf("re-attach after the restart: got %q, %v; want one and two", out.String(), err)
	}
	if err := svc.Exec(ctx, info.ID, ExecRequest{Cmd: []string{"true"}}, func(ExecEvent) error { return nil }); err != nil {
		t.Errorf("exec in the re-adopted sandbox: %v", err)
	}
	for _, id := range []string{info.ID, gone.ID} {
		if err := m2.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
}

// stuckFirstDial is a VM whose first Dial never gets an answer (it ends
// only with its ctx) and whose next ones find the VM stopped.
type stuckFirstDial struct {
	vmm.VM
	dials int
}

func (v *stuckFirstDial) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	v.dials++
	if v.dials == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, vmm.ErrNotRunning
}

// TestReconnectRetriesAStuckDial: a re-adoption whose first dial of the
// agent hangs (the guest's answer swallowed by stale bytes from the dead
// hostd's session) dials again instead of waiting out the whole boot
// timeout.
func TestReconnectRetriesAStuckDial(t *testing.T) {
	defer func(d time.Duration) { reconnectAttempt = d }(reconnectAttempt)
	reconnectAttempt = 10 * time.Millisecond
	vm := &stuckFirstDial{}
	b := &box{vm: vm, dialing: make(chan struct{}, 1), log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := reconnect(ctx, b); !errors.Is(err, vmm.ErrNotRunning) || vm.dials != 2 {
		t.Errorf("reconnect: %v after %d dials; want vmm.ErrNotRunning from a second dial", err, vm.dials)
	}
}
