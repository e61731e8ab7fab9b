package sandbox

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
