//go:build vm

package fleete2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/internal/fleettest"
	"github.com/agentbox/agentbox/internal/waitfor"
)

// TestFleet runs the six end-to-end checks on one fleet: three hosts (a
// cap of 12 sandboxes each), two gateways, a lease of 3 s. Checks that
// kill a member bring it back.
func TestFleet(t *testing.T) {
	e := setup(t)
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"CreateOnOneReplicaUseOnTheOther", fleetCreateOnOneReplicaUseOnTheOther},
		{"ForksStayWithTheirParent", fleetForksStayWithTheirParent},
		{"HostKilled", fleetHostKilled},
		{"GatewayKilledMidStream", fleetGatewayKilledMidStream},
		{"PostgresOutage", fleetPostgresOutage},
		{"BadInput", fleetBadInput},
	} {
		t.Run(c.name, func(t *testing.T) {
			waitfor.Cond(t, "three live hosts", func() bool { return e.live() == 3 })
			c.fn(t, e)
		})
	}
}

const leaseTTL = 3 * time.Second

type env struct {
	f    *fleettest.Fleet
	st   *store.Store
	a, b *client.Client
}

func setup(t *testing.T) *env {
	t.Helper()
	f := fleettest.New(t, fleettest.Options{Hosts: 3, Gateways: 2, Fleet: true, LeaseTTL: leaseTTL, MaxSandboxes: 12})
	ctx := context.Background()
	st, err := store.Open(ctx, f.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e := &env{f: f, st: st, a: newClient(t, f.GatewayURL(0), f.AdminKey()), b: newClient(t, f.GatewayURL(1), f.AdminKey())}
	waitfor.Cond(t, "three live hosts", func() bool { return e.live() == 3 })
	return e
}

func newClient(t *testing.T, url, key string) *client.Client {
	t.Helper()
	c, err := client.New(url, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) live() int {
	hs, _ := e.st.Hosts(context.Background())
	n := 0
	for _, h := range hs {
		if strings.HasPrefix(h.Name, "host-") && h.Placeable(time.Now()) {
			n++
		}
	}
	return n
}

func (e *env) hostOf(t *testing.T, id string) (string, int) {
	t.Helper()
	r, err := e.st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for i := range e.f.Hosts() {
		if e.f.HostName(i) == r.Host {
			return r.Host, i
		}
	}
	t.Fatalf("sandbox %s on %q, no host of the fleet", id, r.Host)
	return "", 0
}

func (e *env) create(t *testing.T, c *client.Client) client.Sandbox {
	t.Helper()
	sb, err := c.CreateSandbox(context.Background(), client.CreateSandboxRequest{MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sb.ID) })
	return sb
}

func wantCode(t *testing.T, err error, status int, code string) *client.APIError {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != status || (code != "" && ae.Code != code) {
		t.Fatalf("got %v, want %d %s", err, status, code)
	}
	return ae
}

// 1. Create through replica A; exec, files, a service URL and a PTY
// through replica B.
func fleetCreateOnOneReplicaUseOnTheOther(t *testing.T, e *env) {
	ctx := context.Background()
	sb := e.create(t, e.a)
	if err := e.b.WriteFile(ctx, sb.ID, "/root/hello.txt", 0o644, strings.NewReader("hello fleet")); err != nil {
		t.Fatal(err)
	}
	r, err := e.b.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh", "-c", "cat /root/hello.txt; mkdir -p /srv && cd /srv && echo served > index.html"}})
	if err != nil || r.Stdout != "hello fleet" {
		t.Fatalf("exec through B: %+v %v", r, err)
	}
	if _, err := e.b.ExecBackground(ctx, sb.ID, client.ExecRequest{Cmd: []string{"python3", "-m", "http.server", "8000", "-d", "/srv"}}); err != nil {
		t.Fatal(err)
	}
	pa, err := e.b.PortAccess(ctx, sb.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	url := e.f.GatewayURL(1) + "/v1/sandboxes/" + sb.ID + "/ports/8000/index.html?token=" + pa.Token
	var body string
	waitfor.Cond(t, "the service URL through replica B", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if body != "served\n" {
		t.Fatalf("service URL served %q", body)
	}
	execID, err := e.b.ExecBackground(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh"}, Tty: true, Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pty, err := e.b.PTY(pctx, sb.ID, execID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pty.Close()
	if _, err := pty.Write([]byte("echo pty-$((6*7))\rexit\r")); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(pty)
	if !bytes.Contains(out, []byte("pty-42")) {
		t.Fatalf("pty through B: %q", out)
	}
}

// 2. Forks go to their parent's host while it has room; past the per-host
// cap the fork is refused with the limit named.
func fleetForksStayWithTheirParent(t *testing.T, e *env) {
	ctx := context.Background()
	parent := e.create(t, e.a)
	if _, err := e.a.Exec(ctx, parent.ID, client.ExecRequest{Cmd: []string{"sh", "-c", "echo parent > /root/who"}}); err != nil {
		t.Fatal(err)
	}
	host, _ := e.hostOf(t, parent.ID)
	forks, err := e.a.Fork(ctx, parent.ID, 5)
	if err != nil || len(forks) != 5 {
		t.Fatalf("fork 5: %v %v", len(forks), err)
	}
	for i, fk := range forks {
		t.Cleanup(func() { _ = e.a.DeleteSandbox(context.Background(), fk.ID) })
		if h, _ := e.hostOf(t, fk.ID); h != host {
			t.Fatalf("fork %s on %s, its parent on %s", fk.ID, h, host)
		}
		// Each fork is its own: it sees the parent's file and writes its own.
		r, err := e.b.Exec(ctx, fk.ID, client.ExecRequest{Cmd: []string{"sh", "-c", fmt.Sprintf("cat /root/who; echo fork%d > /root/who", i)}})
		if err != nil || r.Stdout != "parent\n" {
			t.Fatalf("fork %d: %+v %v", i, r, err)
		}
	}
	r, err := e.a.Exec(ctx, parent.ID, client.ExecRequest{Cmd: []string{"cat", "/root/who"}})
	if err != nil || r.Stdout != "parent\n" {
		t.Fatalf("the parent saw a fork's write: %+v %v", r, err)
	}
	// 1 + 5 on the host of 12: a fork of 7 does not fit there.
	_, err = e.a.Fork(ctx, parent.ID, 7)
	ae := wantCode(t, err, http.StatusInsufficientStorage, "fleet_capacity")
	if !strings.Contains(ae.Message, "max sandboxes") {
		t.Fatalf("the refusal names no limit: %v", ae)
	}
}

// 3. kill -9 a host (hostd and its VMMs): its sandboxes become lost with
// a reason within two lease periods, the others run on, creates go to the
// live hosts; it comes back in a new epoch and runs nothing it lost.
func fleetHostKilled(t *testing.T, e *env) {
	ctx := context.Background()
	var sbs []client.Sandbox
	for range 3 {
		sbs = append(sbs, e.create(t, e.a))
	}
	victim, i := e.hostOf(t, sbs[0].ID)
	// Kill hostd alone first: its VMMs outlive it, as they do by design,
	// and the host must stop them itself when it finds it lost them.
	if err := syscall.Kill(e.f.HostPID(i), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitfor.Cond(t, "the dead host's sandboxes lost", func() bool {
		r, err := e.st.Get(ctx, sbs[0].ID)
		return err == nil && r.State == store.StateLost
	})
	t.Logf("lost after %v (lease %v)", time.Since(killed).Round(100*time.Millisecond), leaseTTL)
	_, err := e.b.Exec(ctx, sbs[0].ID, client.ExecRequest{Cmd: []string{"true"}})
	ae := wantCode(t, err, http.StatusGone, "sandbox_lost")
	if !strings.Contains(ae.Message, victim) || !strings.Contains(ae.Message, "lease expired") {
		t.Fatalf("lost without a reason: %v", ae)
	}
	for _, sb := range sbs[1:] {
		if h, _ := e.hostOf(t, sb.ID); h == victim {
			continue
		}
		if _, err := e.b.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
			t.Fatalf("a sandbox on a live host: %v", err)
		}
	}
	for range 3 {
		sb := e.create(t, e.a)
		if h, _ := e.hostOf(t, sb.ID); h == victim {
			t.Fatalf("placed %s on the dead host", sb.ID)
		}
	}
	vmms := e.f.VMMPIDs(i)
	if len(vmms) == 0 {
		t.Fatal("no VMM of the killed hostd outlived it: nothing to check the fencing with")
	}
	if err := e.f.StartHost(ctx, i); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the host back in a new epoch", func() bool {
		h, err := e.st.GetHost(ctx, victim)
		return err == nil && h.Placeable(time.Now())
	})
	waitfor.Cond(t, "the VMMs of the lost sandboxes stopped by their host", func() bool {
		for _, pid := range vmms {
			if syscall.Kill(pid, 0) == nil {
				return false
			}
		}
		return true
	})
	if r, _ := e.st.Get(ctx, sbs[0].ID); r.State != store.StateLost {
		t.Fatalf("the host came back and wrote over its lost sandbox: %+v", r)
	}
}

// 4. kill -9 a control-plane replica mid exec stream: the client
// re-attaches by offset through the other one and gets every byte.
func fleetGatewayKilledMidStream(t *testing.T, e *env) {
	ctx := context.Background()
	sb := e.create(t, e.b)
	execID, err := e.b.ExecBackground(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh", "-c",
		"for i in $(seq 1 400); do echo line-$i; sleep 0.01; done"}})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	var offset int64
	seen := make(chan struct{})
	var once sync.Once
	err = e.a.Attach(ctx, sb.ID, execID, 0, func(ev client.Event) error {
		if len(ev.Data) > 0 && ev.Offset == offset {
			got.Write(ev.Data)
			offset += int64(len(ev.Data))
			if got.Len() > 100 {
				once.Do(func() { close(seen); _ = e.f.KillGateway(0) })
			}
		}
		return nil
	})
	if err == nil {
		t.Fatal("the stream through the killed replica ended cleanly")
	}
	select {
	case <-seen:
	default:
		t.Fatalf("the stream failed before the replica was killed: %v", err)
	}
	t.Cleanup(func() { _ = e.f.StartGateway(context.Background(), 0) })
	exit := -1
	err = e.b.Attach(ctx, sb.ID, execID, offset, func(ev client.Event) error {
		if len(ev.Data) > 0 && ev.Offset == offset {
			got.Write(ev.Data)
			offset += int64(len(ev.Data))
		}
		if ev.ExitCode != nil {
			exit = *ev.ExitCode
		}
		return nil
	})
	if err != nil || exit != 0 {
		t.Fatalf("re-attach through B: exit %d, %v", exit, err)
	}
	var want strings.Builder
	for i := 1; i <= 400; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if got.String() != want.String() {
		t.Fatalf("got %d bytes, want %d (every byte once)", got.Len(), want.Len())
	}
	if err := e.f.StartGateway(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// 5. Stop and start PostgreSQL under load: calls in the outage fail fast
// and clearly; after it nothing is lost and no VMM was touched.
func fleetPostgresOutage(t *testing.T, e *env) {
	ctx := context.Background()
	var sbs []client.Sandbox
	for range 3 {
		sbs = append(sbs, e.create(t, e.a))
	}
	pids := map[int]bool{}
	for i := range e.f.Hosts() {
		for _, p := range e.f.VMMPIDs(i) {
			pids[p] = true
		}
	}
	if len(pids) == 0 {
		t.Fatal("found no VMM of the fleet's sandboxes")
	}
	logPSS(t, pids)
	if err := e.f.StopPostgres(); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = e.f.StartPostgres(context.Background())
		}
	}()
	for _, c := range []*client.Client{e.a, e.b} {
		start := time.Now()
		_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256})
		wantCode(t, err, http.StatusServiceUnavailable, "fleet_unavailable")
		t.Logf("a create in the outage failed in %v", time.Since(start).Round(time.Millisecond))
	}
	// Sandboxes run on through the outage, in their VMs.
	if err := e.f.StartPostgres(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = false
	for _, sb := range sbs {
		waitfor.Cond(t, "exec after the outage", func() bool {
			_, err := e.b.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
			return err == nil
		})
	}
	list, err := e.a.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.State == "lost" {
			t.Fatalf("sandbox %s lost to the outage: %s", s.ID, s.Error)
		}
	}
	for i := range e.f.Hosts() {
		for _, p := range e.f.VMMPIDs(i) {
			delete(pids, p)
		}
	}
	for p := range pids {
		if syscall.Kill(p, 0) != nil {
			t.Errorf("VMM %d gone after the outage", p)
		}
	}
}

// 6. Bad input: a heartbeat of a stale epoch, a host with a wrong token,
// another project's sandbox through either replica, a placement that fits
// nowhere.
func fleetBadInput(t *testing.T, e *env) {
	ctx := context.Background()
	h, err := e.st.GetHost(ctx, e.f.HostName(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.Heartbeat(ctx, h.Name, h.Epoch-1, leaseTTL, store.Capacity{}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale heartbeat: %v", err)
	}
	if _, _, err := e.st.Register(ctx, store.Registration{Name: "rogue", Addr: "http://127.0.0.1:9", TokenHash: "not-the-fleets",
		TTL: time.Hour, Capacity: store.Capacity{MemMiB: 1 << 30, VCPUs: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the rogue host refused", func() bool {
		hs, err := e.a.Hosts(ctx)
		for _, h := range hs {
			if h.Name == "rogue" {
				return err == nil && h.State == "refused" && !h.TokenAccepted
			}
		}
		return false
	})
	for range 3 {
		sb := e.create(t, e.a)
		if host, _ := e.st.Get(ctx, sb.ID); host.Host == "rogue" {
			t.Fatal("placed on the host with a wrong token")
		}
	}
	if _, err := e.a.CreateProject(ctx, "other"); err != nil {
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
			t.Fatal(err)
		}
	}
	k, err := e.a.CreateKey(ctx, client.CreateKeyRequest{Name: "other", Project: "other"})
	if err != nil {
		t.Fatal(err)
	}
	mine := e.create(t, e.a)
	for _, url := range []string{e.f.GatewayURL(0), e.f.GatewayURL(1)} {
		_, err := newClient(t, url, k.Secret).Exec(ctx, mine.ID, client.ExecRequest{Cmd: []string{"true"}})
		wantCode(t, err, http.StatusNotFound, "sandbox_not_found")
	}
	_, err = e.a.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 900 << 10})
	ae := wantCode(t, err, http.StatusInsufficientStorage, "fleet_capacity")
	if !strings.Contains(ae.Message, "921600 MiB") {
		t.Fatalf("the refusal names no limit: %v", ae)
	}
}

// logPSS logs the VMMs' proportional memory (the paper model's per-sandbox
// memory in the README).
func logPSS(t *testing.T, pids map[int]bool) {
	var total, n int64
	for p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total += kb
				n++
			}
		}
	}
	if n > 0 {
		t.Logf("VMM PSS: %d sandboxes, %.1f MiB each on average (256 MiB guests, idle)", n, float64(total)/float64(n)/1024)
	}
}
