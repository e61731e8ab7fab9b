package metrics

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

type fakeSource struct{}

func (fakeSource) List(context.Context) ([]sandbox.Info, error) {
	return []sandbox.Info{{ID: "sb-1", State: sandbox.StateRunning}, {ID: "sb-2", State: sandbox.StatePaused}}, nil
}
func (fakeSource) VMStats() []sandbox.VMStats {
	return []sandbox.VMStats{{ID: "sb-1", CPUSeconds: 1.5, MemoryBytes: 1 << 20}}
}
func (fakeSource) PoolSizes() map[string]int { return map[string]int{"py": 2} }

func TestMetricsParse(t *testing.T) {
	m := New()
	m.Watch(fakeSource{})
	m.Since("create", time.Now().Add(-time.Second))
	m.Since("exec", time.Now())
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("got %v parsing:\n%s", err, rec.Body.String())
	}
	for _, name := range []string{"agentbox_sandboxes", "agentbox_pool_ready", "agentbox_vmm_cpu_seconds_total", "agentbox_vmm_memory_bytes", "agentbox_operation_duration_seconds"} {
		if fams[name] == nil {
			t.Errorf("got no %s", name)
		}
	}
	want := `
# HELP agentbox_pool_ready Warm sandboxes ready in a template's pool.
# TYPE agentbox_pool_ready gauge
agentbox_pool_ready{template="py"} 2
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "agentbox_pool_ready"); err != nil {
		t.Fatal(err)
	}
}
