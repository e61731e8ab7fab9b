package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/gateway"
	"github.com/agentbox/agentbox/fleet/gateway/gatewaytest"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/internal/waitfor"
)

// bucket stands in for the object store the hosts share: the durable
// pauses by sandbox id.
type bucket struct {
	mu  sync.Mutex
	obj map[string]string
	n   int
	// corrupt: these sandboxes' stored copies fail their digests.
	corrupt map[string]bool
}

// portableHost stands in for a hostd with --snapshot-store, with the
// endpoints a move drives (create, get, pause, resume with import on
// demand, release, exec, delete). It is a stand-in, not hostd, because
// hostd's import on demand is issue 40b's; the VM suite (fleet/fleete2e)
// runs the real ones.
type portableHost struct {
	name     string
	b        *bucket
	durable  bool // its pauses reach the store
	mu       sync.Mutex
	sbs      map[string]string // id -> running, paused
	imported int
	hold     chan struct{}   // set: execs wait for it to close
	inflight int             // execs that waited for hold
	snaps    map[string]bool // snapshots it holds
	srv      *httptest.Server
}

func newPortableHost(t *testing.T, name string, b *bucket, durable bool) *portableHost {
	h := &portableHost{name: name, b: b, durable: durable, sbs: map[string]string{}, snaps: map[string]bool{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *portableHost) state(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sbs[id]
}

func (h *portableHost) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sbs)
}

func (h *portableHost) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+gatewaytest.Token(h.name) {
		http.Error(w, `{"error":{"code":"unauthorized","message":"token"}}`, http.StatusUnauthorized)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	h.mu.Lock()
	defer h.mu.Unlock()
	answer := func(id string) {
		info := map[string]any{"id": id, "state": h.sbs[id]}
		h.b.mu.Lock()
		if m, ok := h.b.obj[id]; ok && h.sbs[id] == "paused" {
			info["durable"], info["durable_manifest"], info["durable_at"] = true, m, time.Now()
		}
		h.b.mu.Unlock()
		_ = json.NewEncoder(w).Encode(info)
	}
	notFound := func(id string) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"code":"sandbox_not_found","message":"sandbox not found: %s"}}`, id)
	}
	switch {
	case len(parts) == 2 && r.Method == http.MethodPost:
		var req client.CreateSandboxRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Snapshot != "" && !h.snaps[req.Snapshot] {
			h.imported++ // from the store
			h.snaps[req.Snapshot] = true
		}
		h.b.mu.Lock()
		h.b.n++
		id := fmt.Sprintf("sb-%d", h.b.n)
		h.b.mu.Unlock()
		h.sbs[id] = "running"
		w.WriteHeader(http.StatusCreated)
		answer(id)
	case len(parts) == 2 && r.Method == http.MethodGet:
		list := []any{}
		for id, st := range h.sbs {
			list = append(list, map[string]any{"id": id, "state": st})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"sandboxes": list})
	case len(parts) == 3 && r.Method == http.MethodGet:
		if _, ok := h.sbs[parts[2]]; !ok {
			notFound(parts[2])
			return
		}
		answer(parts[2])
	case len(parts) == 3 && r.Method == http.MethodDelete:
		delete(h.sbs, parts[2])
		w.WriteHeader(http.StatusNoContent)
	case len(parts) == 4 && parts[3] == "exec" && h.hold != nil:
		// An exec in flight: it waits (unlocked) until the test lets it
		// go, then finds whether its sandbox is still here.
		h.inflight++
		h.mu.Unlock()
		<-h.hold
		h.mu.Lock()
		if _, ok := h.sbs[parts[2]]; !ok {
			notFound(parts[2])
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"exit_code": 0, "stdout": h.name})
	case len(parts) == 4:
		h.op(w, parts[2], parts[3], answer, notFound)
	default:
		notFound(r.URL.Path)
	}
}

func (h *portableHost) op(w http.ResponseWriter, id, op string, answer, notFound func(string)) {
	st, ok := h.sbs[id]
	switch op {
	case "pause":
		if !ok {
			notFound(id)
			return
		}
		h.sbs[id] = "paused"
		if h.durable {
			h.b.mu.Lock()
			h.b.n++
			h.b.obj[id] = fmt.Sprintf("m-%s-%d", id, h.b.n)
			h.b.mu.Unlock()
		}
		answer(id)
	case "resume":
		if !ok {
			h.b.mu.Lock()
			_, inStore := h.b.obj[id]
			bad := h.b.corrupt[id]
			h.b.mu.Unlock()
			if !inStore {
				notFound(id)
				return
			}
			if bad {
				w.WriteHeader(http.StatusUnprocessableEntity)
				fmt.Fprintf(w, `{"error":{"code":"snapshot_corrupt","message":"sandbox %s: a chunk fails its digest"}}`, id)
				return
			}
			h.imported++
		}
		h.sbs[id] = "running"
		answer(id)
	case "release":
		if !ok {
			notFound(id)
			return
		}
		if st != "paused" {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"error":{"code":"sandbox_not_paused","message":"running"}}`)
			return
		}
		delete(h.sbs, id)
		w.WriteHeader(http.StatusNoContent)
	case "snapshots":
		if !ok {
			notFound(id)
			return
		}
		h.b.mu.Lock()
		h.b.n++
		snap := fmt.Sprintf("snap-%d", h.b.n)
		h.b.mu.Unlock()
		h.snaps[snap] = true
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": snap, "sandbox_id": id})
	case "exec":
		if !ok {
			notFound(id)
			return
		}
		h.sbs[id] = "running" // auto-resume
		_ = json.NewEncoder(w).Encode(map[string]any{"exit_code": 0, "stdout": h.name})
	default:
		notFound(id)
	}
}

type portableFleet struct {
	*gatewaytest.Fleet
	hosts map[string]*portableHost
	c     *client.Client
}

func startPortable(t *testing.T, portable bool, names ...string) *portableFleet {
	t.Helper()
	f := &portableFleet{Fleet: gatewaytest.Start(t), hosts: map[string]*portableHost{}}
	b := &bucket{obj: map[string]string{}, corrupt: map[string]bool{}}
	for _, n := range names {
		h := newPortableHost(t, n, b, !strings.HasSuffix(n, "-nostore"))
		f.hosts[n] = h
		f.AddHost(t, n, h.srv.URL, store.Capacity{MemMiB: 4096, VCPUs: 16, MaxSandboxes: 8})
	}
	url := f.Gateway(t, func(c *gateway.Config) { c.Portable = portable })
	f.c = newClient(t, url, gatewaytest.AdminKey)
	return f
}

func (f *portableFleet) create(t *testing.T, host string) string {
	t.Helper()
	ctx := context.Background()
	// Cordon the others so the create lands on host.
	for n := range f.hosts {
		if n != host {
			_, _ = f.Store.SetAdmin(ctx, n, store.AdminCordoned)
		}
	}
	defer func() {
		for n := range f.hosts {
			_, _ = f.Store.SetAdmin(ctx, n, store.AdminActive)
		}
	}()
	sb, err := f.c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

func (f *portableFleet) row(t *testing.T, id string) store.Sandbox {
	t.Helper()
	r, err := f.Store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMigrateMovesARunningSandbox(t *testing.T) {
	f := startPortable(t, true, "h1", "h2")
	ctx := context.Background()
	id := f.create(t, "h1")
	before := f.row(t, id)
	moved, err := f.c.Migrate(ctx, id, "h2")
	if err != nil || moved.State != "running" {
		t.Fatalf("migrate: %+v %v", moved, err)
	}
	r := f.row(t, id)
	h2, _ := f.Store.GetHost(ctx, "h2")
	if r.Host != "h2" || r.HostEpoch != h2.Epoch || r.Gen <= before.Gen || r.State != store.StateRunning || r.Durable == "" {
		t.Fatalf("row after migrate %+v (before %+v)", r, before)
	}
	if f.hosts["h1"].state(id) != "" || f.hosts["h2"].state(id) != "running" || f.hosts["h2"].imported != 1 {
		t.Fatalf("h1 %q, h2 %q (imported %d)", f.hosts["h1"].state(id), f.hosts["h2"].state(id), f.hosts["h2"].imported)
	}
	// Calls go to its new host.
	res, err := f.c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"hostname"}})
	if err != nil || res.Stdout != "h2" {
		t.Fatalf("exec after migrate: %+v %v", res, err)
	}
	// To its own host, and a second migrate while one holds it, are refused.
	_, err = f.c.Migrate(ctx, id, "h2")
	wantCode(t, err, http.StatusConflict, gateway.CodeInvalid)
	if ok, _ := f.Store.SetMoving(ctx, id, time.Now().Add(time.Minute)); !ok {
		t.Fatal("mark")
	}
	_, err = f.c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, err, http.StatusServiceUnavailable, gateway.CodeSandboxMoving)
	_, _ = f.Store.SetMoving(ctx, id, time.Time{})
}

func TestMigrateWithoutAStoreLeavesTheSandboxRunning(t *testing.T) {
	f := startPortable(t, false, "h1", "h2")
	ctx := context.Background()
	id := f.create(t, "h1")
	_, err := f.c.Migrate(ctx, id, "")
	wantCode(t, err, http.StatusConflict, gateway.CodeNotDurable)

	g := startPortable(t, true, "a-nostore", "b")
	id = g.create(t, "a-nostore")
	_, err = g.c.Migrate(ctx, id, "")
	wantCode(t, err, http.StatusConflict, gateway.CodeNotDurable)
	if g.hosts["a-nostore"].state(id) != "running" || g.row(t, id).Host != "a-nostore" {
		t.Fatalf("after a refused migrate: %q on %s", g.hosts["a-nostore"].state(id), g.row(t, id).Host)
	}
}

func TestDeadHostsDurableSandboxResumesElsewhere(t *testing.T) {
	f := startPortable(t, true, "h1", "h2")
	ctx := context.Background()
	paused, running, plain := f.create(t, "h1"), f.create(t, "h1"), f.create(t, "h1")
	if _, err := f.c.Pause(ctx, paused); err != nil {
		t.Fatal(err)
	}
	// running paused once and resumed: its last durable snapshot counts.
	if _, err := f.c.Pause(ctx, running); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Resume(ctx, running); err != nil {
		t.Fatal(err)
	}
	if r := f.row(t, paused); r.Durable == "" || r.State != store.StatePaused {
		t.Fatalf("durable pause not recorded: %+v", r)
	}
	h1, _ := f.Store.GetHost(ctx, "h1")
	if err := f.Store.Heartbeat(ctx, "h1", h1.Epoch, time.Millisecond, store.Capacity{MemMiB: 4096, VCPUs: 16, MaxSandboxes: 8}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "h1's lease to expire", func() bool {
		exp, err := f.Store.ExpireLeases(ctx)
		return err == nil && len(exp) == 1 && exp[0].Paused == 2 && exp[0].Lost == 1
	})
	_, err := f.c.Exec(ctx, plain, client.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, err, http.StatusGone, gateway.CodeSandboxLost)
	// The next call brings each back on h2, from the store.
	sb, err := f.c.Resume(ctx, paused)
	if err != nil || sb.State != "running" {
		t.Fatalf("resume: %+v %v", sb, err)
	}
	res, err := f.c.Exec(ctx, running, client.ExecRequest{Cmd: []string{"hostname"}})
	if err != nil || res.Stdout != "h2" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	for _, id := range []string{paused, running} {
		if r := f.row(t, id); r.Host != "h2" || r.State != store.StateRunning {
			t.Fatalf("%s after its host died: %+v", id, r)
		}
	}
	if f.hosts["h2"].imported != 2 {
		t.Fatalf("h2 imported %d", f.hosts["h2"].imported)
	}
}

func TestDrainEmptiesTheHost(t *testing.T) {
	f := startPortable(t, true, "h1", "h2", "h3")
	ctx := context.Background()
	var ids []string
	for i := range 6 {
		id := f.create(t, "h1")
		if i%2 == 1 {
			if _, err := f.c.Pause(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, id)
	}
	d, err := f.c.DrainHost(ctx, "h1")
	if err != nil || d.Moved != 6 || len(d.Failed) != 0 || d.Host.Admin != store.AdminDraining || d.Host.Sandboxes != 0 {
		t.Fatalf("drain: %+v %v", d, err)
	}
	if n := f.hosts["h1"].count(); n != 0 {
		t.Fatalf("h1 holds %d after the drain", n)
	}
	if on, _ := f.Store.OnHost(ctx, "h1"); len(on) != 0 {
		t.Fatalf("rows on h1: %d", len(on))
	}
	for i, id := range ids {
		r := f.row(t, id)
		want := store.StateRunning
		if i%2 == 1 {
			want = store.StatePaused
		}
		if r.Host == "h1" || r.State != want {
			t.Fatalf("%s after the drain: %+v", id, r)
		}
	}
	// A re-homed paused sandbox is listed and described from its record
	// (looking does not resume it), and imported by its new host on resume.
	list, err := f.c.ListSandboxes(ctx)
	if err != nil || len(list) != 6 {
		t.Fatalf("list after the drain: %d %v", len(list), err)
	}
	if sb, err := f.c.GetSandbox(ctx, ids[1]); err != nil || sb.State != "paused" {
		t.Fatalf("get re-homed: %+v %v", sb, err)
	}
	if sb, err := f.c.Resume(ctx, ids[1]); err != nil || sb.State != "running" {
		t.Fatalf("resume re-homed: %+v %v", sb, err)
	}
}

func TestAnExecCutByAMigrateIsRetryable(t *testing.T) {
	f := startPortable(t, true, "h1", "h2")
	ctx := context.Background()
	id := f.create(t, "h1")
	h1 := f.hosts["h1"]
	h1.mu.Lock()
	h1.hold = make(chan struct{})
	h1.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		_, err := f.c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sleep", "60"}})
		errc <- err
	}()
	waitfor.Cond(t, "the exec to reach h1", func() bool {
		h1.mu.Lock()
		defer h1.mu.Unlock()
		return h1.inflight == 1
	})
	if _, err := f.c.Migrate(ctx, id, "h2"); err != nil {
		t.Fatal(err)
	}
	close(h1.hold)
	err := <-errc
	wantCode(t, err, http.StatusServiceUnavailable, gateway.CodeSandboxMoving)
	// Retried, it runs on the new host.
	res, err := f.c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"hostname"}})
	if err != nil || res.Stdout != "h2" {
		t.Fatalf("retry: %+v %v", res, err)
	}
}

func TestForkPastItsParentsHostGoesElsewhere(t *testing.T) {
	f := startPortable(t, true, "h1", "h2")
	ctx := context.Background()
	parent := f.create(t, "h1")
	// h1 holds 8: seven more make it full.
	for range 7 {
		f.create(t, "h1")
	}
	forks, err := f.c.Fork(ctx, parent, 3)
	if err != nil || len(forks) != 3 {
		t.Fatalf("fork past a full host: %v %v", forks, err)
	}
	for _, fk := range forks {
		if r := f.row(t, fk.ID); r.Host != "h2" || r.Parent != parent {
			t.Fatalf("fork %s: %+v", fk.ID, r)
		}
	}
	if f.hosts["h2"].imported != 1 {
		t.Fatalf("h2 imported the parent's snapshot %d times, want once", f.hosts["h2"].imported)
	}
	// Without a store the same fork is refused with the limit named.
	g := startPortable(t, false, "a", "b")
	p := g.create(t, "a")
	for range 7 {
		g.create(t, "a")
	}
	_, err = g.c.Fork(ctx, p, 1)
	wantCode(t, err, http.StatusInsufficientStorage, gateway.CodeNoCapacity)
}

// TestMigrateOfAPausedSandboxKeepsItsCopyUntilImported: a paused sandbox
// moves only once its new host has imported it (resumed and paused again
// there); then its old host releases its copy. When the stored copy is
// bad, the new host refuses it, the row comes back to the old host,
// which still holds it, and it resumes there: nothing is lost.
func TestMigrateOfAPausedSandboxKeepsItsCopyUntilImported(t *testing.T) {
	f := startPortable(t, true, "h1", "h2")
	ctx := context.Background()
	good, bad := f.create(t, "h1"), f.create(t, "h1")
	for _, id := range []string{good, bad} {
		if _, err := f.c.Pause(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	moved, err := f.c.Migrate(ctx, good, "h2")
	if err != nil || moved.State != "paused" {
		t.Fatalf("migrate of a paused sandbox: %+v %v", moved, err)
	}
	if r := f.row(t, good); r.Host != "h2" || r.State != store.StatePaused || r.Durable == "" {
		t.Fatalf("row after the migrate: %+v", r)
	}
	if f.hosts["h1"].state(good) != "" || f.hosts["h2"].state(good) != "paused" || f.hosts["h2"].imported != 1 {
		t.Fatalf("after the migrate: h1 %q, h2 %q (imported %d)", f.hosts["h1"].state(good), f.hosts["h2"].state(good), f.hosts["h2"].imported)
	}

	f.hosts["h1"].b.mu.Lock()
	f.hosts["h1"].b.corrupt[bad] = true
	f.hosts["h1"].b.mu.Unlock()
	if _, err := f.c.Migrate(ctx, bad, "h2"); err == nil {
		t.Fatal("migrate of a sandbox whose stored copy is bad succeeded")
	} else {
		t.Logf("refused: %v", err)
	}
	if r := f.row(t, bad); r.Host != "h1" || r.State != store.StatePaused {
		t.Fatalf("row after the refused migrate: %+v", r)
	}
	if f.hosts["h1"].state(bad) != "paused" || f.hosts["h2"].state(bad) != "" {
		t.Fatalf("after the refused migrate: h1 %q, h2 %q", f.hosts["h1"].state(bad), f.hosts["h2"].state(bad))
	}
	if sb, err := f.c.Resume(ctx, bad); err != nil || sb.State != "running" || f.row(t, bad).Host != "h1" {
		t.Fatalf("resume where it was: %+v %v", sb, err)
	}
}
