//go:build vm

package fleete2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/internal/fleettest"
	"github.com/agentbox/agentbox/internal/waitfor"
)

// TestPortable runs the portable-snapshot checks (issue 40) on one fleet
// with a snapshot store: three hosts (a cap of 12 sandboxes each), one
// gateway, a lease of 3 s. A check that kills a host brings it back.
func TestPortable(t *testing.T) {
	f := fleettest.New(t, fleettest.Options{Hosts: 3, Gateways: 1, Fleet: true, LeaseTTL: leaseTTL, MaxSandboxes: 12, SnapshotStore: true})
	ctx := context.Background()
	st, err := store.Open(ctx, f.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e := &env{f: f, st: st, a: newClient(t, f.GatewayURL(0), f.AdminKey())}
	e.b = e.a
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"HostKilledResumeElsewhere", portableHostKilled},
		{"MigrateUnderExec", portableMigrateUnderExec},
		{"Drain", portableDrain},
		{"StoreDownDuringPause", portableStoreDown},
		{"FlippedChunk", portableFlippedChunk},
		{"TemplateFetchedOnce", portableTemplateOnce},
	} {
		t.Run(c.name, func(t *testing.T) {
			waitfor.Cond(t, "three live hosts", func() bool { return e.live() == 3 })
			c.fn(t, e)
		})
	}
}

// only cordons every host but i while fn runs (so a create lands on i).
func (e *env) only(t *testing.T, i int, fn func()) {
	t.Helper()
	ctx := context.Background()
	for j := range e.f.Hosts() {
		if j != i {
			if _, err := e.st.SetAdmin(ctx, e.f.HostName(j), store.AdminCordoned); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func() {
		for j := range e.f.Hosts() {
			_, _ = e.st.SetAdmin(ctx, e.f.HostName(j), store.AdminActive)
		}
	}()
	fn()
}

func (e *env) sh(t *testing.T, id, script string) string {
	t.Helper()
	r, err := e.a.Exec(context.Background(), id, client.ExecRequest{Cmd: []string{"sh", "-c", script}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("exec %q on %s: %+v %v", script, id, r, err)
	}
	return strings.TrimSpace(r.Stdout)
}

// counter starts a process that counts in /root/counter and writes 200
// files with their checksums in /root/sums.
const counterScript = `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /root/counter.tmp; mv /root/counter.tmp /root/counter; sleep 0.2; done' >/dev/null 2>&1 &
mkdir -p /root/files && for n in $(seq 1 200); do head -c $((4096 + n * 37)) /dev/urandom > /root/files/f$n; done
cd /root/files && sha256sum f* > /root/sums`

func (e *env) count(t *testing.T, id string) int {
	t.Helper()
	n, err := strconv.Atoi(e.sh(t, id, "cat /root/counter"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// 1. Pause on host 1 a sandbox with a counter and 200 checksummed files;
// kill -9 host 1; the sandbox resumes on another host: the counter goes
// on from where it was, 0 mismatches.
func portableHostKilled(t *testing.T, e *env) {
	ctx := context.Background()
	var sb client.Sandbox
	e.only(t, 1, func() { sb = e.create(t, e.a) })
	e.sh(t, sb.ID, counterScript)
	waitfor.Cond(t, "the counter to count", func() bool { return e.count(t, sb.ID) > 2 })
	if _, err := e.a.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	row, err := e.st.Get(ctx, sb.ID)
	if err != nil || row.Durable == "" {
		t.Fatalf("pause not durable in the fleet's record: %+v %v", row, err)
	}
	if err := e.f.KillHost(1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.f.StartHost(context.Background(), 1) })
	waitfor.Cond(t, "host 1's lease to expire (its sandbox paused, not lost)", func() bool {
		r, err := e.st.Get(ctx, sb.ID)
		return err == nil && r.HostState == store.HostDead && r.State == store.StatePaused
	})
	resumed, err := e.a.Resume(ctx, sb.ID)
	if err != nil || resumed.State != "running" {
		t.Fatalf("resume after host 1 died: %+v %v", resumed, err)
	}
	if h, _ := e.hostOf(t, sb.ID); h == e.f.HostName(1) {
		t.Fatalf("resumed on the dead host %s", h)
	}
	first := e.count(t, sb.ID)
	waitfor.Cond(t, "the counter to go on", func() bool { return e.count(t, sb.ID) > first })
	if bad := e.sh(t, sb.ID, "cd /root/files && sha256sum -c /root/sums 2>/dev/null | grep -vc ': OK$' || true"); bad != "0" {
		t.Fatalf("%s mismatches after the resume on another host", bad)
	}
	if err := e.f.StartHost(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

// retryable reports whether err is a call the fleet asks to retry.
func retryable(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && (ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusBadGateway)
}

// 2. Migrate 5 running sandboxes while clients exec in them: each exec
// completes or fails retryably (and is retried); none is lost.
func portableMigrateUnderExec(t *testing.T, e *env) {
	ctx := context.Background()
	var sbs []client.Sandbox
	for range 5 {
		sbs = append(sbs, e.create(t, e.a))
	}
	stop := make(chan struct{})
	// migrated[i] closes when sbs[i]'s migrate has answered: a client whose
	// exec failed retryably waits for it before retrying.
	migrated := make([]chan struct{}, len(sbs))
	for i := range migrated {
		migrated[i] = make(chan struct{})
	}
	var (
		wg                    sync.WaitGroup
		mu                    sync.Mutex
		done, retried, failed int
		lost                  []string
	)
	for i, sb := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				want := fmt.Sprintf("%s-%d", sb.ID, n)
				for {
					r, err := e.a.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", want}})
					mu.Lock()
					switch {
					case err == nil && strings.TrimSpace(r.Stdout) == want:
						done++
					case err != nil && retryable(err):
						retried++
					default:
						failed++
						lost = append(lost, fmt.Sprintf("%s: %+v %v", sb.ID, r, err))
					}
					mu.Unlock()
					if err == nil || !retryable(err) {
						break
					}
					select {
					case <-migrated[i]:
					case <-stop:
						return
					}
				}
			}
		}()
	}
	for i, sb := range sbs {
		from, _ := e.hostOf(t, sb.ID)
		moved, err := e.a.Migrate(ctx, sb.ID, "")
		close(migrated[i])
		if err != nil {
			t.Fatalf("migrate %s: %v", sb.ID, err)
		}
		if to, _ := e.hostOf(t, sb.ID); to == from || moved.State != "running" {
			t.Fatalf("migrate %s: %s -> %s, %s", sb.ID, from, to, moved.State)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("execs: %d completed, %d retried, %d failed otherwise", done, retried, failed)
	if failed > 0 {
		t.Fatalf("execs lost during migrate: %v", lost)
	}
}

// 3. Drain a host with 6 sandboxes, running and paused: all move, the host
// ends empty.
func portableDrain(t *testing.T, e *env) {
	ctx := context.Background()
	var ids []string
	e.only(t, 2, func() {
		for i := range 6 {
			sb := e.create(t, e.a)
			e.sh(t, sb.ID, "echo "+sb.ID+" > /root/me")
			if i%2 == 1 {
				if _, err := e.a.Pause(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
			}
			ids = append(ids, sb.ID)
		}
	})
	d, err := e.a.DrainHost(ctx, e.f.HostName(2))
	t.Cleanup(func() { _, _ = e.a.SetHostAdmin(context.Background(), e.f.HostName(2), "uncordon") })
	if err != nil || d.Moved != 6 || d.Sandboxes != 0 {
		t.Fatalf("drain: %+v %v", d, err)
	}
	if on, _ := e.st.OnHost(ctx, e.f.HostName(2)); len(on) != 0 {
		t.Fatalf("%d sandboxes left on the drained host", len(on))
	}
	for _, id := range ids {
		if got := e.sh(t, id, "cat /root/me"); got != id {
			t.Fatalf("%s after the drain: %q", id, got)
		}
	}
}

// 4. The store is down during a pause: the pause fails, the sandbox runs
// on, nothing lost.
func portableStoreDown(t *testing.T, e *env) {
	ctx := context.Background()
	sb := e.create(t, e.a)
	e.sh(t, sb.ID, "echo kept > /root/kept")
	e.f.StoreDown(true)
	_, err := e.a.Pause(ctx, sb.ID)
	e.f.StoreDown(false)
	wantCode(t, err, http.StatusServiceUnavailable, "snapshot_store_unavailable")
	if got := e.sh(t, sb.ID, "cat /root/kept"); got != "kept" {
		t.Fatalf("after the failed pause: %q", got)
	}
	if r, _ := e.st.Get(ctx, sb.ID); r.State != store.StateRunning {
		t.Fatalf("after the failed pause the record says %s", r.State)
	}
}

// manifest is what the check reads of a stored manifest.
type manifest struct {
	Files []struct {
		Name   string `json:"name"`
		Chunks []struct {
			Digest string `json:"digest"`
			Stored int64  `json:"stored"`
		} `json:"chunks"`
	} `json:"files"`
}

func (e *env) manifest(t *testing.T, id string) manifest {
	t.Helper()
	b, err := e.f.Store().Get(fleettest.StoreBucket, "fleet/manifests/"+id+".json")
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// 5. A chunk flipped in the store: the move elsewhere is refused with a
// digest error (the sandbox stays where it was, and resumes there);
// another moves and resumes.
func portableFlippedChunk(t *testing.T, e *env) {
	ctx := context.Background()
	bad, good := e.create(t, e.a), e.create(t, e.a)
	for _, sb := range []client.Sandbox{bad, good} {
		// Memory of its own, so that its chunks are not shared.
		e.sh(t, sb.ID, "head -c 8388608 /dev/urandom > /dev/shm/own")
		if _, err := e.a.Pause(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	rb, _ := e.st.Get(ctx, bad.ID)
	// A chunk that no other manifest has: a host may hold any other in its
	// chunk cache (verified), and resume from there.
	keys, err := e.f.Store().Keys(fleettest.StoreBucket, "fleet/manifests/")
	if err != nil {
		t.Fatal(err)
	}
	shared := map[string]bool{}
	for _, k := range keys {
		id := strings.TrimSuffix(strings.TrimPrefix(k, "fleet/manifests/"), ".json")
		if id == rb.Durable {
			continue
		}
		for _, f := range e.manifest(t, id).Files {
			for _, c := range f.Chunks {
				shared[c.Digest] = true
			}
		}
	}
	// The least compressible of its own: the random memory it wrote.
	flipped, most := "", int64(-1)
	for _, f := range e.manifest(t, rb.Durable).Files {
		for _, c := range f.Chunks {
			if c.Digest != "" && !shared[c.Digest] && c.Stored > most {
				flipped, most = c.Digest, c.Stored
			}
		}
	}
	if flipped == "" {
		t.Fatal("no chunk of its own in the paused sandbox's manifest")
	}
	key := "fleet/chunks/" + flipped
	obj, err := e.f.Store().Get(fleettest.StoreBucket, key)
	if err != nil {
		t.Fatal(err)
	}
	obj[len(obj)/2] ^= 0x40
	if err := e.f.Store().PutDirect(fleettest.StoreBucket, key, obj); err != nil {
		t.Fatal(err)
	}
	// A paused sandbox's migrate imports it on the new host before its
	// old host releases it: the import meets the flipped chunk, and the
	// sandbox stays where it was, which still holds it.
	_, err = e.a.Migrate(ctx, bad.ID, "")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != "snapshot_corrupt" {
		t.Fatalf("migrate elsewhere with a flipped chunk: %v, want snapshot_corrupt", err)
	}
	if !strings.Contains(ae.Message, flipped[:12]) && !strings.Contains(strings.ToLower(ae.Message), "digest") {
		t.Fatalf("refusal does not name the digest: %v", ae)
	}
	if r, _ := e.st.Get(ctx, bad.ID); r.Host != rb.Host {
		t.Fatalf("after the refused migrate the row is on %s, want %s", r.Host, rb.Host)
	}
	if r, err := e.a.Resume(ctx, bad.ID); err != nil || r.State != "running" {
		t.Fatalf("resume where it was after the refused migrate: %+v %v", r, err)
	}
	if _, err := e.a.Migrate(ctx, good.ID, ""); err != nil {
		t.Fatalf("the other sandbox: %v", err)
	}
	if r, err := e.a.Resume(ctx, good.ID); err != nil || r.State != "running" {
		t.Fatalf("the other sandbox's resume elsewhere: %+v %v", r, err)
	}
}

// 6. A template built on host 0 used on host 2: its chunks are fetched
// once; a second create there fetches nothing.
func portableTemplateOnce(t *testing.T, e *env) {
	ctx := context.Background()
	var src client.Sandbox
	e.only(t, 0, func() { src = e.create(t, e.a) })
	e.sh(t, src.ID, "echo from-template > /root/origin")
	snap, err := e.a.Snapshot(ctx, src.ID, client.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	name := "portable-" + strings.ToLower(src.ID[len(src.ID)-6:])
	if _, err := e.a.CreateTemplate(ctx, client.CreateTemplateRequest{Name: client.TemplateName(name), SnapshotID: snap.ID}); err != nil {
		t.Fatal(err)
	}
	create := func() client.Sandbox {
		sb, err := e.a.CreateSandbox(ctx, client.CreateSandboxRequest{Template: name, MemoryMiB: 256, VCPUs: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.a.DeleteSandbox(context.Background(), sb.ID) })
		return sb
	}
	var first, second client.Sandbox
	before := e.f.StoreGets("chunks")
	e.only(t, 2, func() { first = create() })
	mid := e.f.StoreGets("chunks")
	e.only(t, 2, func() { second = create() })
	after := e.f.StoreGets("chunks")
	t.Logf("chunk GETs: first create on host 2 %d, second %d", mid-before, after-mid)
	for _, sb := range []client.Sandbox{first, second} {
		if h, _ := e.hostOf(t, sb.ID); h != e.f.HostName(2) {
			t.Fatalf("%s on %s", sb.ID, h)
		}
		if got := e.sh(t, sb.ID, "cat /root/origin"); got != "from-template" {
			t.Fatalf("%s: %q", sb.ID, got)
		}
	}
	if mid == before || after != mid {
		t.Fatalf("chunk GETs: first create %d (want > 0), second %d (want 0)", mid-before, after-mid)
	}
}
