package portproxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
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
