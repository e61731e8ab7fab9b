//go:build vm

package hostd_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	fleetstore "github.com/agentbox/agentbox/fleet/store"
	"github.com/agentbox/agentbox/fleet/store/storetest"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/hostdtest"
	"github.com/agentbox/agentbox/internal/waitfor"
)

// A hostd in fleet mode accepts only its host token (not its data dir's
// key), registers its host, and when it comes back stops the sandbox that
// its new epoch does not own (the fleet has no row of it).
func TestFleetHostTokenAndFencing(t *testing.T) {
	ctx := context.Background()
	st, pg := storetest.Open(t)
	secret := []byte("the fleet secret of this test")
	token := hosttoken.Token(secret, "h1")
	data := t.TempDir()
	fleet := func(c *hostd.Config) {
		c.Fleet = hostd.FleetConfig{DB: pg.DSN(""), Host: "h1", Secret: secret, LeaseTTL: 3 * time.Second}
		c.LeaveRunning = true
	}
	h := hostdtest.Start(t, data, fleet)
	defer h.Stop()
	waitfor.Cond(t, "h1 to register", func() bool {
		hr, err := st.GetHost(ctx, "h1")
		return err == nil && hr.State == fleetstore.HostLive
	})
	hr, _ := st.GetHost(ctx, "h1")
	if hr.Addr != h.URL || hr.TokenHash != hosttoken.Hash(token) || hr.MemMiB <= 0 || hr.VCPUs <= 0 {
		t.Fatalf("registered %+v (url %s)", hr, h.URL)
	}
	key, _ := os.ReadFile(filepath.Join(data, "api-key"))
	for _, k := range []string{hostdtest.Key, strings.TrimSpace(string(key)), "ab_made-up"} {
		if code := status(t, h.URL, k); code != http.StatusUnauthorized {
			t.Errorf("key %.6s...: %d, want 401", k, code)
		}
	}
	if code := status(t, h.URL, token); code != http.StatusOK {
		t.Fatalf("host token: %d", code)
	}
	c, err := client.New(h.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// hostd stops (leaving the VM running) and comes back: its new epoch
	// owns nothing, so the sandbox is stopped and deleted.
	h.Stop()
	h2 := hostdtest.Start(t, data, fleet)
	defer h2.Stop()
	c2, err := client.New(h2.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the unowned sandbox to be deleted", func() bool {
		_, err := c2.GetSandbox(ctx, sb.ID)
		var ae *client.APIError
		return errors.As(err, &ae) && ae.Status == http.StatusNotFound
	})
	if hr2, _ := st.GetHost(ctx, "h1"); hr2.Epoch <= hr.Epoch {
		t.Fatalf("epoch %d after the restart, was %d", hr2.Epoch, hr.Epoch)
	}
}

func status(t *testing.T, url, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
