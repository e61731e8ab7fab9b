package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
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

// TestReadoptExecs: the execs that run on across a hostd restart are the
// next hostd's: a timeout armed before the restart still kills its exec,
// and each exec's end is recorded in the flight recorder's log, once.
func TestReadoptExecs(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Recorder = recorder.New(recorder.Options{Store: o.Store.(*store.Store), Logger: o.Logger})
	})
	ctx := context.Background()
	info := e.create(CreateOptions{})
	long, err := e.svc.Execs.StartExec(ctx, info.ID, ExecRequest{Cmd: []string{"sleep", "600"}, TimeoutS: 3})
	if err != nil {
		t.Fatal(err)
	}
	short, err := e.svc.Execs.StartExec(ctx, info.ID, ExecRequest{Cmd: []string{"sh", "-c", "sleep 1; echo done"}})
	if err != nil {
		t.Fatal(err)
	}
	// One paused across the restart: the next hostd takes its exec over
	// when it resumes, and records its end.
	paused := e.create(CreateOptions{})
	frozen, err := e.svc.Execs.StartExec(ctx, paused.ID, ExecRequest{Cmd: []string{"sleep", "600"}, TimeoutS: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Pause(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	opts := e.m.opts
	opts.Recorder = recorder.New(recorder.Options{Store: e.st, Logger: opts.Logger})
	m2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, id := range []string{info.ID, paused.ID} {
			if err := m2.Delete(ctx, id); err != nil {
				t.Error(err)
			}
		}
		if err := m2.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	ends := waitExecEnds(t, e.st, info.ID, long, short)
	if d := ends[long]; d.Signal != "SIGKILL" || d.TimeoutS != 3 {
		t.Errorf("the exec with a 3 s timeout, after the restart: end %+v, want killed (SIGKILL) under timeout_s 3", d)
	}
	if d := ends[short]; d.ExitCode == nil || *d.ExitCode != 0 || d.Stdout == nil || string(d.Stdout.Head) != "done\n" {
		t.Errorf("the exec that ended after the restart: end %+v, want exit 0 with its output", d)
	}
	if _, err := m2.Resume(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	// The fake guest's processes do not outlive the save of a pause (a
	// real guest's do, in its memory): the end is that the session is gone.
	if d := waitExecEnds(t, e.st, paused.ID, frozen)[frozen]; d.Signal != "SIGKILL" && d.Error == "" {
		t.Errorf("the exec of the sandbox paused across the restart, once resumed: end %+v, want it ended", d)
	}
}

// waitExecEnds waits for the end events of execs ids in sandbox id's log
// and returns them by exec id; an exec with two ends fails the test.
func waitExecEnds(t *testing.T, st *store.Store, id string, ids ...string) map[string]recorder.ExecData {
	t.Helper()
	ends := map[string]recorder.ExecData{}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		evs, err := st.ListEvents(context.Background(), store.EventQuery{SandboxID: id, Types: []string{recorder.TypeExec}})
		if err != nil {
			t.Fatal(err)
		}
		clear(ends)
		for _, ev := range evs {
			var d recorder.ExecData
			if err := json.Unmarshal(ev.Data, &d); err != nil || d.Phase != recorder.PhaseEnd {
				continue
			}
			if _, dup := ends[d.ExecID]; dup {
				t.Fatalf("exec %s has two end events", d.ExecID)
			}
			ends[d.ExecID] = d
		}
		if len(ends) >= len(ids) {
			return ends
		}
	}
	t.Fatalf("end events of %v: got %d after a minute", ids, len(ends))
	return nil
}

// TestReadoptKeepsTTLAndMeters: the TTL of a sandbox re-adopted after a
// hostd restart still ends it in the next manager (deleted, or paused for
// on_timeout "pause"), and the re-adopted sandbox's usage meters go on
// counting its agent traffic.
func TestReadoptKeepsTTLAndMeters(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// 3 s: the TTLs must not end before the Release (checked below).
	deleted := e.create(CreateOptions{TimeoutS: 3})
	paused := e.create(CreateOptions{TimeoutS: 3, Limits: Limits{OnTimeout: OnTimeoutPause}})
	metered := e.create(CreateOptions{})
	if out, _ := e.run(metered.ID, "echo before"); out != "before\n" {
		t.Fatalf("exec before the restart: got %q", out)
	}
	if err := e.m.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	for _, id := range []string{deleted.ID, paused.ID} {
		if r, err := e.st.GetSandbox(ctx, id); err != nil || State(r.State) != StateRunning {
			t.Fatalf("sandbox %s at the release: got %+v, %v; want running (its TTL must end in the next manager)", id, r, err)
		}
	}
	m2, err := New(e.m.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range []string{paused.ID, metered.ID} {
			if err := m2.Delete(ctx, id); err != nil {
				t.Errorf("delete %s: %v", id, err)
			}
		}
		if err := m2.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := m2.Get(ctx, metered.ID); got.State != StateRunning {
		t.Fatalf("metered sandbox after the restart: got %s (%s), want running", got.State, got.Error)
	}

	before, err := m2.Usage(ctx, metered.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = m2.Service().Exec(ctx, metered.ID, ExecRequest{Cmd: []string{"echo", "after"}}, func(ev ExecEvent) error { out.Write(ev.Data); return nil })
	if err != nil || out.String() != "after\n" {
		t.Fatalf("exec after the restart: got %q, %v", out.String(), err)
	}
	after, err := m2.Usage(ctx, metered.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.BytesIn <= before.BytesIn || after.BytesOut <= before.BytesOut {
		t.Errorf("usage across an exec in the re-adopted sandbox: bytes in %d -> %d, out %d -> %d; want both to grow",
			before.BytesIn, after.BytesIn, before.BytesOut, after.BytesOut)
	}
	if after.DiskUsedBytes <= 0 {
		t.Errorf("disk used by the re-adopted sandbox: got %d, want its overlay's size", after.DiskUsedBytes)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		_, errDel := m2.Get(ctx, deleted.ID)
		got, errPause := m2.Get(ctx, paused.ID)
		if errors.Is(errDel, ErrNotFound) && errPause == nil && got.State == StatePaused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TTLs after the restart, 30 s on: the on_timeout=delete sandbox: %v (want not found); the on_timeout=pause one: %s, %v (want paused)",
				errDel, got.State, errPause)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
