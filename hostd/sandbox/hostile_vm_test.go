//go:build vm

package sandbox_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/api/apitest"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/qemu"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// openManager starts a manager on data (QEMU, TCG, SQLite) and returns it
// with a function that stops it and its store, as a hostd exit would.
func openManager(t *testing.T, data string) (*sandbox.Manager, *store.Store, func()) {
	t.Helper()
	a := vmmtest.FindAssets(t)
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := qemu.New(qemu.Options{Accel: vmm.AccelTCG, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := filepath.EvalSymlinks(a.BaseImage)
	opts := sandbox.Options{Driver: d, Store: st, DataDir: data, Kernel: a.Kernel,
		Initramfs: a.Initramfs, BaseImage: base, DefaultMemoryMiB: 256, Logger: log}
	jailed(&opts)
	m, err := sandbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	closed := false
	stop := func() {
		if !closed {
			closed = true
			m.Close(context.Background())
			st.Close()
		}
	}
	t.Cleanup(stop)
	return m, st, stop
}

// TestHostileGuest boots one sandbox and runs issue 16's probe findings
// that need a real guest against it, in order: the clock (11), a name that
// is not UTF-8 (5), a listing over ttrpc's 4 MiB beside a streamed exec
// (4), signals to PID 1 (1), a guest that steals the agent channel (§3), a
// hostd that dies while resuming (7), and a VM that dies on its own (1).
func TestHostileGuest(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	m, st, stop := openManager(t, data)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := m.Service()
	top := t // the managers belong to the whole test, not to a subtest

	t.Run("a cold-booted guest's clock is the host's", func(t *testing.T) {
		before := time.Now()
		out := strings.TrimSpace(sh(t, m, sb.ID, "date +%s.%N"))
		after := time.Now()
		secs, err := strconv.ParseFloat(out, 64)
		if err != nil {
			t.Fatalf("date: %q", out)
		}
		guest := time.Unix(0, int64(secs*1e9))
		// The guest read its clock between before and after; allow for the
		// setting's own round trip.
		if guest.Before(before.Add(-300*time.Millisecond)) || guest.After(after.Add(300*time.Millisecond)) {
			t.Errorf("guest clock %v, host between %v and %v", guest, before, after)
		}
	})

	t.Run("a name that is not UTF-8", func(t *testing.T) {
		sh(t, m, sb.ID, `mkdir -p /root/l1 && printf latin-1 > "$(printf '/root/l1/caf\351')"`)
		ents, err := svc.ListDir(ctx, sb.ID, "/root/l1")
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name != "caf\xe9" {
			t.Fatalf("listed %+v", ents)
		}
		rc, err := svc.ReadFile(ctx, sb.ID, ents[0].Path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "latin-1" {
			t.Fatalf("read %q", b)
		}
	})

	t.Run("a listing over 4 MiB beside a streamed exec", func(t *testing.T) {
		const n = 15000
		sh(t, m, sb.ID, "mkdir -p /root/many && cd /root/many && seq -f '%0150g' "+strconv.Itoa(n)+" | xargs touch")
		streamed := make(chan string, 1)
		go func() {
			var out strings.Builder
			err := svc.Exec(ctx, sb.ID, sandbox.ExecRequest{Cmd: []string{"sh", "-c", "sleep 2; echo done"}}, func(e sandbox.ExecEvent) error {
				out.Write(e.Data)
				return nil
			})
			if err != nil {
				out.WriteString(err.Error())
			}
			streamed <- out.String()
		}()
		ents, err := svc.ListDir(ctx, sb.ID, "/root/many")
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != n {
			t.Errorf("listed %d entries, want %d", len(ents), n)
		}
		if got := <-streamed; got != "done\n" {
			t.Errorf("the streamed exec beside the listing: %q", got)
		}
		sh(t, m, sb.ID, "rm -rf /root/many")
	})

	t.Run("PID 1 survives the signals a guest process can send it", func(t *testing.T) {
		// Each kill queues a signal; once PID 1 has none pending, its
		// handlers have taken them all (a fatal one would end the guest).
		got := sh(t, m, sb.ID, "for s in TERM INT HUP QUIT SEGV BUS USR1 USR2 ABRT PIPE ALRM; do kill -$s 1; done; "+
			"for i in $(seq 600); do grep -q '^ShdPnd:[[:space:]]*0*$' /proc/1/status && break; sleep 0.05; done; grep ^ShdPnd: /proc/1/status")
		if f := strings.Fields(got); len(f) != 2 || strings.Trim(f[1], "0") != "" {
			t.Fatalf("PID 1 still has signals pending 30 s after they were sent: %q", got)
		}
		if got := sh(t, m, sb.ID, "echo alive"); got != "alive\n" {
			t.Fatalf("after the signals: %q", got)
		}
		if info, _ := m.Get(ctx, sb.ID); info.State != sandbox.StateRunning {
			t.Fatalf("state %s (%s)", info.State, info.Error)
		}
	})

	t.Run("a console flood is capped", func(t *testing.T) {
		sh(t, m, sb.ID, "head -c 5000000 /dev/zero | tr '\\0' x > /dev/console; echo done")
		log := filepath.Join(data, "sandboxes", sb.ID, "console.log")
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(log + ".1"); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		old, err1 := os.Stat(log + ".1")
		cur, err2 := os.Stat(log)
		if err1 != nil || err2 != nil {
			t.Fatalf("console logs: %v, %v", err1, err2)
		}
		if cur.Size()+old.Size() > 5000000+1<<20 || cur.Size() >= 4<<20 {
			t.Errorf("console.log %d bytes, console.log.1 %d bytes", cur.Size(), old.Size())
		}
		// The VMM appends at the new start: no hole where the old log was.
		if st, ok := cur.Sys().(*syscall.Stat_t); ok && cur.Size() > 1<<20 && st.Blocks*512 < cur.Size()/2 {
			t.Errorf("console.log is sparse: %d bytes in %d blocks", cur.Size(), st.Blocks)
		}
	})

	t.Run("a guest that steals the agent channel and writes garbage", func(t *testing.T) {
		stealChannel(t, m, sb.ID)
	})

	t.Run("a hostd that dies while resuming leaves the sandbox paused", func(t *testing.T) {
		sh(t, m, sb.ID, "echo kept > /root/kept")
		if _, err := m.Pause(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		stop()
		// What a hostd killed in the middle of Resume's restore leaves.
		st2, err := store.Open(ctx, filepath.Join(data, "agentbox.db"))
		if err != nil {
			t.Fatal(err)
		}
		if err := st2.SetSandboxState(ctx, sb.ID, string(sandbox.StateResuming), "", 0); err != nil {
			t.Fatal(err)
		}
		st2.Close()
		m, st, stop = openManager(top, data)
		svc = m.Service()
		if info, _ := m.Get(ctx, sb.ID); info.State != sandbox.StatePaused {
			t.Fatalf("after the restart: %s (%s), want paused", info.State, info.Error)
		}
		if got := sh(t, m, sb.ID, "cat /root/kept"); got != "kept\n" { // resumes on its own
			t.Fatalf("after resume: %q", got)
		}
	})
	_ = st

	t.Run("a VM that dies keeps its disk until deleted", func(t *testing.T) {
		info, err := m.Get(ctx, sb.ID)
		if err != nil || info.VMPID == 0 {
			t.Fatalf("%+v %v", info, err)
		}
		if err := syscall.Kill(info.VMPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for info.State != sandbox.StateFailed && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			info, _ = m.Get(ctx, sb.ID)
		}
		if info.State != sandbox.StateFailed {
			t.Fatalf("state %s after the VM died", info.State)
		}
		dir := filepath.Join(data, "sandboxes", sb.ID)
		disks, _ := filepath.Glob(filepath.Join(dir, "*.qcow2"))
		if len(disks) == 0 {
			t.Fatalf("the failed sandbox's overlay is gone from %s", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, "console.log")); err != nil {
			t.Errorf("console log: %v", err)
		}
		if err := m.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("deleted, and %s is still there: %v", dir, err)
		}
	})
}

// stealChannel runs chanthief (testdata) as root in sandbox id: it takes
// a copy of guestinit's agent-channel fd, writes garbage and forged yamux
// frames to the host and steals what the host sends for 5 s. The sandbox
// must recover or be marked failed; a fork of it, made before, answers
// execs through the API throughout and after; hostd's heap grows by little.
func stealChannel(t *testing.T, m *sandbox.Manager, id string) {
	ctx := context.Background()
	svc := m.Service()
	srv := httptest.NewServer(api.New(api.Options{Manager: svc, Auth: auth.New(apitest.NewKeys(auth.Hash(hostileKey))),
		Health: func() api.HealthInfo { return api.HealthInfo{VMM: "qemu"} }}))
	defer srv.Close()
	c, err := client.New(srv.URL, hostileKey)
	if err != nil {
		t.Fatal(err)
	}
	otherAnswers := func(other string) {
		t.Helper()
		if _, err := c.Health(ctx); err != nil {
			t.Fatalf("API health: %v", err)
		}
		r, err := c.Exec(ctx, other, client.ExecRequest{Cmd: []string{"echo", "other"}})
		if err != nil || r.Stdout != "other\n" {
			t.Fatalf("the fork answered %+v, %v", r, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "chanthief")
	build := exec.Command("go", "build", "-o", bin, "./testdata/chanthief")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build chanthief: %v: %s", err, out)
	}
	forks, err := m.Fork(ctx, id, sandbox.ForkOptions{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	other := forks[0].ID
	defer m.Delete(ctx, other)
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	err = svc.WriteFile(ctx, id, "/root/chanthief", 0o755, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	base := liveHeap()
	// Detached, so that the exec that starts it ends before the channel
	// breaks.
	sh(t, m, id, "setsid /root/chanthief > /root/chanthief.log 2>&1 < /dev/null & echo started")
	// While it runs and after: the fork answers; the thief's sandbox
	// recovers (or fails, with a reason).
	recovered := false
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		otherAnswers(other)
		if _, err := m.Get(ctx, id); err != nil {
			t.Fatalf("get: %v", err)
		}
		info, _ := m.Get(ctx, id)
		if info.State == sandbox.StateFailed {
			t.Logf("the thief's sandbox failed: %s", info.Error)
			break
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := tryExec(cctx, svc, id, "cat /root/chanthief.log; echo back")
		cancel()
		t.Logf("exec %d in the thief's sandbox: %q %v", i, out, err)
		if err == nil && strings.HasSuffix(out, "done\nback\n") { // after the thief is done
			recovered = true
			break
		}
		time.Sleep(time.Second)
	}
	info, _ := m.Get(ctx, id)
	if !recovered && info.State != sandbox.StateFailed {
		t.Fatalf("the thief's sandbox neither recovered nor failed: %s", info.State)
	}
	otherAnswers(other)
	if grown := int64(liveHeap()) - int64(base); grown > 64<<20 {
		t.Errorf("hostd's heap grew %d MiB over its baseline", grown>>20)
	}
}

// tryExec runs cmd in sandbox id and returns its stdout, or the error.
func tryExec(ctx context.Context, svc sandbox.Service, id, cmd string) (string, error) {
	var out strings.Builder
	err := svc.Exec(ctx, id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", cmd}}, func(e sandbox.ExecEvent) error {
		out.Write(e.Data)
		return nil
	})
	return out.String(), err
}

// liveHeap is the heap live after a collection.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
