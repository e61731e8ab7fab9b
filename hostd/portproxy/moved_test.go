package portproxy

import (
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// TestMovedServiceRecords: a sandbox's service records taken from one
// proxy and given to another (two hosts, two keys) keep its token, its
// public ports and its share links there, across a restart of the second;
// the second's own sandboxes are untouched; records of the wrong form are
// refused; Forget drops them.
func TestMovedServiceRecords(t *testing.T) {
	a, _, _ := newTestProxy(t)
	b, hb, _ := newTestProxy(t)
	const u = "http://80-sb-1.sb.example/"
	if a.Token("sb-1") == b.Token("sb-1") {
		t.Fatal("two hosts' keys derive the same token")
	}
	if err := a.SetPublic("sb-1", 8080, true); err != nil {
		t.Fatal(err)
	}
	share, _, err := a.ShareToken("sb-1", 80, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if rec := do(hb, "GET", u+"?token="+share, nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("A's share link on B before the move: %d, want 401", rec.Code)
	}
	recs, err := a.ServiceRecords("sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetServiceRecords("sb-1", recs); err != nil {
		t.Fatal(err)
	}
	check := func(p *Proxy, h http.Handler) {
		t.Helper()
		if p.Token("sb-1") != a.Token("sb-1") || !p.Public("sb-1", 8080) || p.Public("sb-1", 80) {
			t.Fatalf("after the move: token %q (want %q), public 8080 %v, 80 %v", p.Token("sb-1"), a.Token("sb-1"), p.Public("sb-1", 8080), p.Public("sb-1", 80))
		}
		for _, cred := range []string{share, a.Token("sb-1")} {
			if rec := do(h, "GET", u, map[string]string{TokenHeader: cred}); rec.Code != http.StatusOK {
				t.Fatalf("A's credential %.8s… on B: %d %s", cred, rec.Code, rec.Body)
			}
		}
		// A link B mints for the moved sandbox opens on A's terms too.
		s2, _, _ := p.ShareToken("sb-1", 80, time.Hour)
		if v, _ := a.sign.check(s2, "sb-1", 80); v != valid {
			t.Fatalf("B's link of the moved sandbox on A: verdict %d", v)
		}
		if got, _ := p.ServiceRecords("sb-1"); got.Token != recs.Token || !slices.Equal(got.ShareKey, recs.ShareKey) {
			t.Fatalf("B's records of the moved sandbox differ from A's: %+v", got)
		}
	}
	check(b, hb)
	// B restarts (same data directory): the records stay.
	b2, err := New(Options{Sandboxes: b.sbx, Auth: fakeAuth{}, Domain: "sb.example", DataDir: filepath.Dir(b.sign.moved.path)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b2.Close)
	check(b2, b2.Wrap(http.NotFoundHandler()))
	if b2.Token("sb-other") != b.Token("sb-other") || b2.Token("sb-other") == a.Token("sb-other") {
		t.Fatal("B's own sandbox's token changed")
	}

	bad := []sandbox.ServiceRecords{
		{Token: recs.Token, ShareKey: recs.ShareKey[:8]},
		{Token: "abt_short", ShareKey: recs.ShareKey},
		{Token: "", ShareKey: recs.ShareKey},
		{Token: recs.Token, ShareKey: recs.ShareKey, Public: []int{0}},
		{Token: recs.Token, ShareKey: recs.ShareKey, Public: []int{80, 80}},
		{Token: recs.Token, ShareKey: recs.ShareKey, Public: make([]int, 70000)},
	}
	for _, r := range bad {
		if err := b2.SetServiceRecords("sb-other", r); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("records %+v: %v, want ErrInvalid", r, err)
		}
	}
	if b2.Token("sb-other") != b.Token("sb-other") {
		t.Fatal("a refused record changed the sandbox's token")
	}

	if err := b2.Forget("sb-1"); err != nil {
		t.Fatal(err)
	}
	if b2.Token("sb-1") == a.Token("sb-1") || b2.Public("sb-1", 8080) {
		t.Fatal("Forget left the moved sandbox's records")
	}
	if rec := do(b2.Wrap(http.NotFoundHandler()), "GET", u, map[string]string{TokenHeader: share}); rec.Code != http.StatusUnauthorized {
		t.Fatalf("A's share link after Forget: %d, want 401", rec.Code)
	}
}

// TestLegacyShareLink: a link signed before share keys (by the host's key
// itself) still opens its sandbox's port.
func TestLegacyShareLink(t *testing.T) {
	p, h, _ := newTestProxy(t)
	old := p.sign.legacyShare("sb-1", 80, time.Now().Add(time.Hour).Truncate(time.Second), "")
	if rec := do(h, "GET", "http://80-sb-1.sb.example/", map[string]string{TokenHeader: old}); rec.Code != http.StatusOK {
		t.Fatalf("a legacy share link: %d", rec.Code)
	}
}
