//go:build vm

package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/qemu"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// newManager returns a real manager (QEMU, TCG, SQLite) on a fresh data dir.
func newManager(t *testing.T, data string, tweaks ...func(*sandbox.Options)) *sandbox.Manager {
	t.Helper()
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
	d, err := qemu.New(qemu.Options{Accel: vmm.AccelTCG, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := filepath.EvalSymlinks(a.BaseImage)
	opts := sandbox.Options{Driver: d, Store: st, DataDir: data, Kernel: a.Kernel,
		Initramfs: a.Initramfs, BaseImage: base, DefaultMemoryMiB: 256, Logger: log}
	for _, tw := range tweaks {
		tw(&opts)
	}
	jailed(&opts)
	m, err := sandbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close(context.Background())
		st.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("hostd log:\n%s", b)
		}
		logf.Close()
	})
	return m
}

func sh(t *testing.T, m *sandbox.Manager, id, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := m.Service().Exec(ctx, id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}}, func(e sandbox.ExecEvent) error {
		out.Write(e.Data)
		return nil
	})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return out.String()
}

func TestSnapshotsForksAndPause(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	m := newManager(t, data)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, m, sb.ID, "echo v1 > /root/state")
	snap, err := m.Snapshot(ctx, sb.ID, sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("restore brings the old state back", func(t *testing.T) {
		sh(t, m, sb.ID, "echo v2 > /root/state")
		r, err := m.Create(ctx, sandbox.CreateOptions{Snapshot: snap.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got := sh(t, m, r.ID, "cat /root/state"); got != "v1\n" {
			t.Errorf("restored: got %q, want v1", got)
		}
		if got := sh(t, m, sb.ID, "cat /root/state"); got != "v2\n" {
			t.Errorf("source after restore: got %q, want v2", got)
		}
		if err := m.Delete(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("fork 3", func(t *testing.T) { checkForks(t, m, sb.ID) })
	t.Run("pause and resume keep a running process", func(t *testing.T) { checkPauseResume(t, m, sb.ID) })
	t.Run("an exec timeout kills after a pause and resume", func(t *testing.T) { checkTimeoutAcrossPause(t, m, sb.ID) })
	t.Run("snapshot in use is not deleted", func(t *testing.T) { checkInUse(t, m, snap.ID) })
	t.Run("corrupt snapshot is refused", func(t *testing.T) { checkCorrupt(t, m, sb.ID, snap.ID, data) })
	t.Run("garbage collection", func(t *testing.T) { checkGC(t, m, sb.ID, snap.ID, data) })
}

func checkForks(t *testing.T, m *sandbox.Manager, id string) {
	ctx := context.Background()
	sh(t, m, id, "echo parent > /root/from-parent")
	forks, err := m.Fork(ctx, id, sandbox.ForkOptions{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	rand := map[string]bool{}
	hosts := map[string]bool{}
	for _, f := range forks {
		if got := sh(t, m, f.ID, "cat /root/from-parent"); got != "parent\n" {
			t.Errorf("fork %s: got %q, want the parent's file", f.ID, got)
		}
		rand[sh(t, m, f.ID, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'")] = true
		hosts[sh(t, m, f.ID, "hostname")] = true
	}
	if len(rand) != 3 || len(hosts) != 3 {
		t.Errorf("got %d distinct urandom reads and %d hostnames over 3 forks, want 3 and 3", len(rand), len(hosts))
	}
	sh(t, m, forks[0].ID, "echo mine > /root/from-parent")
	for _, f := range forks[1:] {
		if got := sh(t, m, f.ID, "cat /root/from-parent"); got != "parent\n" {
			t.Errorf("a write in fork 0 shows in %s: %q", f.ID, got)
		}
	}
	for _, f := range forks {
		if err := m.Delete(ctx, f.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func checkPauseResume(t *testing.T, m *sandbox.Manager, id string) {
	ctx := context.Background()
	execID, err := m.Service().StartExec(ctx, id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", "for i in $(seq 1 30); do echo $i; sleep 0.1; done; echo finished"}})
	if err != nil {
		t.Fatal(err)
	}
	var before strings.Builder
	attachCtx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	_ = m.Service().Attach(attachCtx, id, execID, 0, func(e sandbox.ExecEvent) error { before.Write(e.Data); return nil })
	cancel()
	info, err := m.Pause(ctx, id)
	if err != nil || info.State != sandbox.StatePaused {
		t.Fatalf("pause: %+v, %v", info, err)
	}
	// An exec on a paused sandbox resumes it transparently (R12).
	if err := m.Service().Exec(ctx, id, sandbox.ExecRequest{Cmd: []string{"true"}}, func(sandbox.ExecEvent) error { return nil }); err != nil {
		t.Errorf("exec while paused: got %v, want it to resume the sandbox", err)
	}
	if info, err := m.Get(ctx, id); err != nil || info.State != sandbox.StateRunning {
		t.Fatalf("after the exec: got %s, %v, want running", info.State, err)
	}
	// The process went on; its session's output continues where it was.
	var after strings.Builder
	var exit sandbox.ExecEvent
	err = m.Service().Attach(ctx, id, execID, uint64(before.Len()), func(e sandbox.ExecEvent) error {
		after.Write(e.Data)
		if e.Type == sandbox.EventExit {
			exit = e
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	want.WriteString("finished\n")
	if got := before.String() + after.String(); got != want.String() || exit.ExitCode != 0 || before.Len() == 0 {
		t.Errorf("output across pause/resume: before %q, after %q, exit %d; want all of it in order", before.String(), after.String(), exit.ExitCode)
	}
	if got := sh(t, m, id, "cat /root/state"); got != "v2\n" {
		t.Errorf("files after resume: got %q", got)
	}
}

func checkInUse(t *testing.T, m *sandbox.Manager, snapID string) {
	ctx := context.Background()
	r, err := m.Create(ctx, sandbox.CreateOptions{Snapshot: snapID})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Service().DeleteSnapshot(ctx, snapID); !errors.Is(err, sandbox.ErrInUse) {
		t.Errorf("delete a snapshot a sandbox uses: got %v, want ErrInUse", err)
	}
	if err := m.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	// The source sandbox still overlays the snapshot's layer.
	if err := m.Service().DeleteSnapshot(ctx, snapID); !errors.Is(err, sandbox.ErrInUse) {
		t.Errorf("delete the layer the source still overlays: got %v, want ErrInUse", err)
	}
}

func checkCorrupt(t *testing.T, m *sandbox.Manager, id, firstSnap, data string) {
	ctx := context.Background()
	damage := func(snapID, file string) {
		path := filepath.Join(data, "snapshots", snapID, file)
		os.Chmod(path, 0o644)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("corruption"), 1<<20)
		f.Close()
	}
	// The first snapshot came from a cold-booted VM: its memory is a file.
	damage(firstSnap, "memory")
	if _, err := m.Create(ctx, sandbox.CreateOptions{Snapshot: firstSnap}); !errors.Is(err, sandbox.ErrCorrupt) {
		t.Errorf("restore with a corrupt memory file: got %v, want ErrCorrupt", err)
	}
	for _, file := range []string{"disk.qcow2", "state"} {
		snap, err := m.Snapshot(ctx, id, sandbox.SnapshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		damage(snap.ID, file)
		if _, err := m.Create(ctx, sandbox.CreateOptions{Snapshot: snap.ID}); !errors.Is(err, sandbox.ErrCorrupt) {
			t.Errorf("restore with a corrupt %s: got %v, want ErrCorrupt", file, err)
		}
	}
}

// checkGC deletes the source sandbox, then its snapshots newest first: a
// snapshot is refused while a newer one overlays it, and the fork snapshot
// in the chain goes by itself once nothing uses it.
func checkGC(t *testing.T, m *sandbox.Manager, id, firstSnap, data string) {
	ctx := context.Background()
	latest, err := m.Snapshot(ctx, id, sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The chain of the newest snapshot must not need the deleted sandbox.
	r, err := m.Create(ctx, sandbox.CreateOptions{Snapshot: latest.ID})
	if err != nil {
		t.Fatalf("restore after the source sandbox is gone: %v", err)
	}
	if got := sh(t, m, r.ID, "cat /root/from-parent"); got != "parent\n" {
		t.Errorf("restored after the source is gone: got %q", got)
	}
	if err := m.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Service().DeleteSnapshot(ctx, firstSnap); !errors.Is(err, sandbox.ErrInUse) {
		t.Errorf("delete the oldest snapshot of a chain: got %v, want ErrInUse", err)
	}
	all, err := m.Service().ListSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Kind == "snapshot" && all[i].ID != firstSnap {
			if err := m.Service().DeleteSnapshot(ctx, all[i].ID); err != nil {
				t.Fatalf("delete %s: %v", all[i].ID, err)
			}
		}
	}
	left, _ := m.Service().ListSnapshots(ctx)
	if len(left) != 1 || left[0].ID != firstSnap {
		t.Errorf("got %+v left, want only the first snapshot (the fork snapshot collected)", left)
	}
	if err := m.Service().DeleteSnapshot(ctx, firstSnap); err != nil {
		t.Errorf("delete an unused snapshot: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "snapshots")); len(ents) != 0 {
		t.Errorf("%d snapshot dirs left", len(ents))
	}
}

// checkTimeoutAcrossPause: the kill of an exec's timeout reaches the
// command through the VM the sandbox runs when it falls due, not the one
// it started on.
func checkTimeoutAcrossPause(t *testing.T, m *sandbox.Manager, id string) {
	ctx := context.Background()
	execID, err := m.Service().StartExec(ctx, id, sandbox.ExecRequest{Cmd: []string{"sleep", "120"}, TimeoutS: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	var exit sandbox.ExecEvent
	err = m.Service().Attach(ctx, id, execID, 0, func(e sandbox.ExecEvent) error {
		if e.Type == sandbox.EventExit {
			exit = e
		}
		return nil
	})
	if err != nil || exit.Signal != "SIGKILL" {
		t.Errorf("got exit %+v, %v, want the command killed by its timeout", exit, err)
	}
}
