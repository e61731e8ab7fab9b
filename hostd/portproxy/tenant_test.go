package portproxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// projectAuth accepts ab_key and ab_other as API keys, but lets only ab_key
// reach sb-1 (its project owns sb-1).
type projectAuth struct{}

func (projectAuth) Authenticate(r *http.Request) error {
	switch r.Header.Get("Authorization") {
	case "Bearer ab_key", "Bearer ab_other":
		return nil
	}
	return ErrUnauthorized
}

func (a projectAuth) AuthenticateFor(r *http.Request, id string) error {
	if err := a.Authenticate(r); err != nil {
		return err
	}
	if id == "sb-1" && r.Header.Get("Authorization") != "Bearer ab_key" {
		return ErrUnauthorized
	}
	return nil
}

// TestServiceURLOfAnotherProject: an API key opens the service URLs of its
// project's sandboxes only.
func TestServiceURLOfAnotherProject(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "guest") }))
	t.Cleanup(up.Close)
	p, err := New(Options{Sandboxes: &fakeSandboxes{upstream: up.Listener.Addr().String()}, Auth: projectAuth{},
		Domain: "sb.example", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	h := p.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tc := range []struct {
		name, key string
		want      int
	}{
		{"its project's key", "ab_key", 200},
		{"another project's key", "ab_other", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(h, "GET", "http://80-sb-1.sb.example/", map[string]string{"Authorization": "Bearer " + tc.key})
			if rec.Code != tc.want {
				t.Errorf("got %d %s, want %d", rec.Code, rec.Body, tc.want)
			}
		})
	}
}

// keyAuth is projectAuth whose keys' ids are checked: "key_dead" is revoked.
type keyAuth struct{ projectAuth }

func (keyAuth) Check(_ context.Context, id string) error {
	if id == "key_dead" {
		return ErrUnauthorized
	}
	return nil
}

// TestShareLinkDiesWithItsKey: a link carries the id of the key that minted
// it and opens nothing once that key is revoked; a link of no key lives
// until it expires.
func TestShareLinkDiesWithItsKey(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "guest") }))
	t.Cleanup(up.Close)
	p, err := New(Options{Sandboxes: &fakeSandboxes{upstream: up.Listener.Addr().String()}, Auth: keyAuth{},
		Domain: "sb.example", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	h := p.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	live, _, _ := p.ShareTokenBy("sb-1", 80, time.Hour, "key_live")
	dead, _, _ := p.ShareTokenBy("sb-1", 80, time.Hour, "key_dead")
	none, _, _ := p.ShareToken("sb-1", 80, time.Hour)
	forged := strings.Replace(dead, "key_dead", "key_live", 1)
	for _, tc := range []struct {
		name, tok string
		want      int
	}{{"live key's link", live, 200}, {"revoked key's link", dead, 401}, {"link of no key", none, 200}, {"link with another key id", forged, 401}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(h, "GET", "http://80-sb-1.sb.example/?token="+tc.tok, nil)
			if rec.Code != tc.want {
				t.Errorf("got %d %s, want %d", rec.Code, rec.Body, tc.want)
			}
		})
	}
}
