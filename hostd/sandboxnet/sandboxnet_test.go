package sandboxnet

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/metrics"
	"github.com/agentbox/agentbox/hostd/netns"
)

type noStore struct{}

func (noStore) PutNetworkPolicy(context.Context, string, []byte) error { return nil }
func (noStore) GetNetworkPolicy(context.Context, string) ([]byte, error) {
	return nil, errors.New("no policy")
}
func (noStore) DeleteNetworkPolicy(context.Context, string) error { return nil }

// A leftover namespace that cannot be removed (mounted a second time over
// its own path, as a bind mount by an earlier run leaves it: the unmount
// takes the top mount off and the unlink is EBUSY) does not fail the
// sweep, so hostd starts (issue 38 #9); it is counted in
// agentbox_netns_unremoved_total, and a removable one beside it goes.
func TestSweepSkipsBusyNamespace(t *testing.T) {
	dataDir := t.TempDir()
	met := metrics.New()
	ca, err := egress.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{DataDir: dataDir, Store: noStore{}, Proxy: egress.Options{CA: ca}, Unremoved: met.NetnsUnremoved})
	if err != nil {
		t.Fatal(err)
	}
	inst := netns.InstallationOf(dataDir)
	busy, gone := inst.Name("sb-busy"), inst.Name("sb-gone")
	for _, name := range []string{busy, gone} {
		t.Cleanup(func() {
			// One Remove per mount: the first takes the extra mount off.
			for i := 0; i < 3 && netns.Exists(name); i++ {
				_ = netns.Remove(name)
			}
			if netns.Exists(name) {
				t.Errorf("namespace %s left behind", name)
			}
		})
		if err := netns.InNew(name, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(netns.Path(busy), netns.Path(busy), "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s again: %v", busy, err)
	}
	if err := netns.Remove(busy); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("remove of the twice-mounted namespace: got %v, want EBUSY (the test does not reproduce a busy namespace)", err)
	}
	if err := unix.Mount(netns.Path(busy), netns.Path(busy), "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s again: %v", busy, err)
	}

	if err := s.Sweep(); err != nil {
		t.Fatalf("Sweep: got %v, want no error", err)
	}
	if netns.Exists(gone) {
		t.Errorf("namespace %s not swept", gone)
	}
	if !netns.Exists(busy) {
		t.Errorf("namespace %s gone, want it left in place", busy)
	}
	rec := httptest.NewRecorder()
	met.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := "\nagentbox_netns_unremoved_total 1\n"; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("metrics: got\n%s\nwant a line %q", rec.Body.String(), strings.TrimSpace(want))
	}
}
