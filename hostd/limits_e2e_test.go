//go:build vm

package hostd_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestKeyMaximumsAndMetrics needs no VM: requests over a maximum are
// refused before anything boots.
func TestKeyMaximumsAndMetrics(t *testing.T) {
	data := vmmtest.ShortTempDir(t)
	c, stop := startHostdOn(t, data, func(cfg *hostd.Config) {
		// testKey is stored under the name "env" (it comes like AGENTBOX_API_KEY).
		cfg.KeyMaximums = map[string]sandbox.Maximums{"env": {VCPUs: 1, Limits: sandbox.Limits{MaxPids: 100, NetBps: 1 << 20}}}
	})
	t.Cleanup(stop)
	ctx := context.Background()
	for _, tc := range []struct {
		name, want string
		req        client.CreateSandboxRequest
	}{
		{"vcpus", `vcpus 2 is over the maximum of 1 for API key "env"`, client.CreateSandboxRequest{VCPUs: 2}},
		{"max_pids", `max_pids 500 is over the maximum of 100 for API key "env"`, client.CreateSandboxRequest{MaxPids: 500}},
		{"net_bps", `net_bps 2097152 is over the maximum of 1048576 for API key "env"`, client.CreateSandboxRequest{NetBps: 2 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSandbox(ctx, tc.req)
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, tc.want) {
				t.Fatalf("got %v, want a 400 naming %q", err, tc.want)
			}
		})
	}
	t.Run("metrics need the key and parse", func(t *testing.T) {
		resp, err := c.Raw().GetMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		if resp.StatusCode != http.StatusOK || err != nil || fams["agentbox_sandboxes"] == nil {
			t.Fatalf("got %d, %v, %d families", resp.StatusCode, err, len(fams))
		}
		anon, _ := client.New(c.Raw().Server, "")
		resp2, err := anon.Raw().GetMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		resp2.Body.Close()
		if resp2.StatusCode != http.StatusUnauthorized {
			t.Fatalf("without a key: got %d, want 401", resp2.StatusCode)
		}
	})
}
