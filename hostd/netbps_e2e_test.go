//go:build vm

package hostd_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/internal/nettest"
)

// TestNetworkBandwidth boots one sandbox with net_bps, checks the tc limits
// on its tap, moves data both ways through the egress proxy under them, and
// checks that a fork (a restore) and a pause/resume carry the limits too.
// It asserts no timing; the measured rates are logged.
func TestNetworkBandwidth(t *testing.T) {
	up := nettest.New(t)
	c, data := startNetHostd(t, up)
	ctx := context.Background()
	const bps = 256 << 10
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 256, NetBps: bps,
		Network: &client.NetworkPolicyInput{AllowDomains: []string{"allowed.test"}}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sb.ID) })
	if sb.Limits == nil || sb.Limits.NetBps != bps {
		t.Fatalf("got limits %+v, want net_bps %d", sb.Limits, bps)
	}
	inst := netns.InstallationOf(data)
	checkRate := func(t *testing.T, id string) {
		t.Helper()
		got, err := netns.GetRate(inst.Name(id))
		want := netns.Rate{HostToGuest: bps, GuestToHost: bps, Redirect: true}
		if err != nil || got != want {
			t.Fatalf("tc on %s's tap: got %+v, %v, want %+v", id, got, err, want)
		}
	}
	checkRate(t, sb.ID)

	t.Run("a download through the proxy arrives intact", func(t *testing.T) {
		const n = 1 << 20
		r := mustExec(t, c, sb.ID, "sh", "-c",
			"curl -sS -m 120 -o /root/dl -w '%{speed_download} %{http_code}' 'http://allowed.test/bytes?n="+strconv.Itoa(n)+"' && echo && sha256sum /root/dl && head -c 300 /root/dl | od -c | head -8")
		sum := sha256.Sum256(make([]byte, n))
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		if r.ExitCode != 0 || len(lines) < 2 || !strings.HasPrefix(lines[1], hex.EncodeToString(sum[:])) {
			t.Fatalf("got exit %d, %q (stderr %q), want status 200 and %d zero bytes", r.ExitCode, r.Stdout, r.Stderr, n)
		}
		t.Logf("host → guest: %s B/s (status) under a %d B/s limit", lines[0], bps)
	})
	t.Run("an upload through the proxy completes", func(t *testing.T) {
		// Under 256 KiB: the upstream answers without reading the body,
		// and Go's server drains only that much before closing.
		r := mustExec(t, c, sb.ID, "sh", "-c",
			"head -c 200000 /dev/urandom > /root/ul && curl -sS -m 120 -o /dev/null -w '%{http_code} %{size_upload} %{speed_upload}' --data-binary @/root/ul http://allowed.test/upload")
		f := strings.Fields(r.Stdout)
		if r.ExitCode != 0 || len(f) != 3 || f[0] != "200" || f[1] != "200000" {
			t.Fatalf("got exit %d, %q (stderr %q), want 200 and 200000 bytes sent", r.ExitCode, r.Stdout, r.Stderr)
		}
		t.Logf("guest → host: %s B/s under a %d B/s limit", f[2], bps)
	})
	t.Run("a fork and a resumed sandbox keep the limits", func(t *testing.T) {
		forks, err := c.Fork(ctx, sb.ID, 1)
		if err != nil {
			t.Fatalf("fork: %v", err)
		}
		f := forks[0]
		t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), f.ID) })
		checkRate(t, f.ID)
		if _, err := c.Pause(ctx, f.ID); err != nil {
			t.Fatalf("pause: %v", err)
		}
		if _, err := c.Resume(ctx, f.ID); err != nil {
			t.Fatalf("resume: %v", err)
		}
		checkRate(t, f.ID)
		if _, status, _ := curl(t, c, f.ID, "http://allowed.test/after-resume"); status != "200" {
			t.Fatalf("after resume: got %s, want 200", status)
		}
	})
}
