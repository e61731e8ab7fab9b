//go:build vm

package hostd_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/s3test"
	"github.com/agentbox/agentbox/internal/waitfor"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// portableBucket is the bucket the portable test's hostds share.
const portableBucket = "agentbox-portable"

// portableCounter starts a process counting in /root/counter and writes
// 200 files with their checksums in /root/sums.
const portableCounter = `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /root/counter.tmp; mv /root/counter.tmp /root/counter; sleep 0.2; done' >/dev/null 2>&1 &
mkdir -p /root/files && for n in $(seq 1 200); do head -c $((4096 + n * 37)) /dev/urandom > /root/files/f$n; done
cd /root/files && sha256sum f* > /root/sums`

// TestPortablePause: two hostds with their own data directories share one
// snapshot store. A pause on A with the store down fails and the sandbox
// runs on; a pause on A is durable; A is killed with -9 and B resumes the
// sandbox it never held: the counter goes on, the 200 files match, a
// background exec started on A reads on by offset to its exit, a service
// URL keeps its token and public port, and a share link made on A opens
// it on B (movedChecks). A sandbox paused on B whose chunk was flipped in the store is refused on
// A with a digest error, and A holds nothing of it. A, back, releases its
// copy of the moved sandbox; the store keeps it.
func TestPortablePause(t *testing.T) {
	s3 := s3test.Start(t, portableBucket)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	t.Setenv("CHILD_SNAPSHOT_STORE", "s3://"+portableBucket+"/fleet?endpoint="+s3.Endpoint+"&region=us-east-1")
	dataA, dataB := vmmtest.ShortTempDir(t), vmmtest.ShortTempDir(t)
	netDataDirsMu.Lock()
	netDataDirs = append(netDataDirs, dataA, dataB)
	netDataDirsMu.Unlock()
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range []string{dataA, dataB} {
				b, _ := os.ReadFile(filepath.Join(d, "child-hostd.log"))
				t.Logf("child hostd log of %s:\n%s", d, b)
			}
		}
	})
	ctx := context.Background()
	a, b := startChild(t, dataA, ""), startChild(t, dataB, "")

	sb, err := a.c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	sh := func(c *client.Client, id, script string) string {
		t.Helper()
		r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", script}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec %q on %s: %+v %v", script, id, r, err)
		}
		return strings.TrimSpace(r.Stdout)
	}
	count := func(c *client.Client, id string) int {
		t.Helper()
		n, err := strconv.Atoi(sh(c, id, "cat /root/counter"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	sh(a.c, sb.ID, portableCounter)
	waitfor.Cond(t, "the counter to count", func() bool { return count(a.c, sb.ID) > 2 })
	moved := movedWork(t, a.c, dataA, sb.ID)

	// The store is down: the pause fails, the sandbox runs on.
	s3.SetDown(true)
	_, err = a.c.Pause(ctx, sb.ID)
	s3.SetDown(false)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != "snapshot_store_unavailable" {
		t.Fatalf("pause with the store down: %v, want 503 snapshot_store_unavailable", err)
	}
	before := count(a.c, sb.ID)
	waitfor.Cond(t, "the counter to go on after the failed pause", func() bool { return count(a.c, sb.ID) > before })
	if got, err := a.c.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" || got.Durable {
		t.Fatalf("after the failed pause: %+v %v", got, err)
	}

	s3.ResetCounts()
	start := time.Now()
	paused, err := a.c.Pause(ctx, sb.ID)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !paused.Durable || paused.DurableManifest == "" || paused.DurableAt == nil {
		t.Fatalf("pause with a store is not durable: %+v", paused)
	}
	t.Logf("pause to durable of a 256 MiB sandbox: %v, %d chunk PUTs, %s", took, s3.Count(http.MethodPut, "fleet/chunks/"), exportLog(t, dataA))
	a.kill()

	s3.ResetCounts()
	start = time.Now()
	resumed, err := b.c.Resume(ctx, sb.ID)
	took = time.Since(start)
	if err != nil || resumed.State != "running" {
		t.Fatalf("resume on B of the sandbox paused on A: %+v %v", resumed, err)
	}
	killVMAtEnd(t, vmOf(t, dataB, sb.ID))
	t.Logf("resume on another host (cold cache): %v, %d chunk GETs", took, s3.Count(http.MethodGet, "fleet/chunks/"))
	first := count(b.c, sb.ID)
	waitfor.Cond(t, "the counter to go on, on B", func() bool { return count(b.c, sb.ID) > first })
	if bad := sh(b.c, sb.ID, "cd /root/files && sha256sum -c /root/sums 2>/dev/null | grep -vc ': OK$' || true"); bad != "0" {
		t.Fatalf("%s mismatches after the resume on B", bad)
	}
	moved.check(t, b.c, dataB)
	// For comparison: a pause on B (its lineage is in the store already)
	// and a local resume there.
	s3.ResetCounts()
	start = time.Now()
	// The store keeps one paused manifest per sandbox: the new one.
	if paused, err = b.c.Pause(ctx, sb.ID); err != nil || !paused.Durable {
		t.Fatalf("pause on B: %+v %v", paused, err)
	}
	t.Logf("pause to durable on B (lineage stored): %v, %d chunk PUTs", time.Since(start), s3.Count(http.MethodPut, "fleet/chunks/"))
	start = time.Now()
	if r, err := b.c.Resume(ctx, sb.ID); err != nil || r.State != "running" {
		t.Fatalf("local resume on B: %+v %v", r, err)
	}
	t.Logf("local resume on B: %v", time.Since(start))
	killVMAtEnd(t, vmOf(t, dataB, sb.ID))

	// A chunk of its own flipped in the store: refused with a digest
	// error, nothing made.
	bad, err := b.c.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	killVMAtEnd(t, vmOf(t, dataB, bad.ID))
	sh(b.c, bad.ID, "head -c 8388608 /dev/urandom > /dev/shm/own")
	pb, err := b.c.Pause(ctx, bad.ID)
	if err != nil || !pb.Durable {
		t.Fatalf("pause on B: %+v %v", pb, err)
	}
	flipped := ownChunk(t, s3, pb.DurableManifest, paused.DurableManifest)
	if err := s3.Flip(portableBucket, "fleet/chunks/"+flipped, 100); err != nil {
		t.Fatal(err)
	}
	a = startChild(t, dataA, "")
	_, err = a.c.Resume(ctx, bad.ID)
	if !errors.As(err, &ae) || ae.Code != "snapshot_corrupt" || !strings.Contains(ae.Message, flipped[:12]) && !strings.Contains(strings.ToLower(ae.Message), "digest") {
		t.Fatalf("resume of a flipped chunk: %v, want snapshot_corrupt naming the digest", err)
	}
	t.Logf("refused: %v", err)
	if _, err := a.c.GetSandbox(ctx, bad.ID); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("after the refused import A has %s: %v", bad.ID, err)
	}
	if ents, _ := filepath.Glob(filepath.Join(dataA, "sandboxes", "*"+bad.ID+"*")); len(ents) != 0 {
		t.Fatalf("after the refused import: %v", ents)
	}

	// A still holds the moved sandbox, paused and durable: it releases it;
	// its ref stays in the store.
	if err := a.c.Release(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.GetSandbox(ctx, sb.ID); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("after the release A has %s: %v", sb.ID, err)
	}
	if _, err := s3.Get(portableBucket, "fleet/refs/sandboxes/"+sb.ID); err != nil {
		t.Fatalf("the release dropped the store's ref: %v", err)
	}
	for _, id := range []string{sb.ID, bad.ID} {
		if err := b.c.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s3.Get(portableBucket, "fleet/refs/sandboxes/"+sb.ID); err == nil {
		t.Fatal("the delete left the store's ref")
	}
}

// exportLog is what hostd logged of its last export (sizes, chunks).
func exportLog(t *testing.T, data string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(data, "child-hostd.log"))
	var last string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "paused state durable") || strings.Contains(l, "snapshot exported") {
			last += regexp.MustCompile(`^.*?msg=`).ReplaceAllString(l, "") + "; "
		}
	}
	return last
}

// ownChunk is a chunk digest of manifest id that manifest other lacks.
func ownChunk(t *testing.T, s3 *s3test.Server, id, other string) string {
	t.Helper()
	digests := func(id string) []string {
		b, err := s3.Get(portableBucket, "fleet/manifests/"+id+".json")
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Files []struct {
				Chunks []struct {
					Digest string `json:"digest"`
				} `json:"chunks"`
			} `json:"files"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				if c.Digest != "" {
					out = append(out, c.Digest)
				}
			}
		}
		return out
	}
	shared := map[string]bool{}
	for _, d := range digests(other) {
		shared[d] = true
	}
	for _, d := range digests(id) {
		if !shared[d] {
			return d
		}
	}
	t.Fatalf("manifest %s has no chunk of its own", id)
	return ""
}
