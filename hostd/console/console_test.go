package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/console"
)

func TestConsoleServesBundleWithCSP(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(console.Mount(api))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := noRedirect.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/console/")
	if resp.StatusCode != 200 || !strings.Contains(body, `src="/console/assets/index.js"`) {
		t.Fatalf("/console/: %d %q", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, "<style") {
		t.Errorf("inline script or style in index.html: %s", body)
	}
	if resp, _ := get("/console/assets/index.js"); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("index.js: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, _ := get("/console"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/console/" {
		t.Errorf("/console: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := get("/v1/sandboxes"); resp.StatusCode != http.StatusTeapot {
		t.Errorf("/v1/sandboxes went to the console: %d", resp.StatusCode)
	}
	if resp, _ := get("/consolex"); resp.StatusCode != http.StatusTeapot {
		t.Errorf("/consolex went to the console: %d", resp.StatusCode)
	}
}
