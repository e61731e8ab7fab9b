package oci

import (
	"errors"
	"net/http"
	"testing"
)

type okTransport struct{}

func (okTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
}

// TestPolicyTransport: plain HTTP goes only to loopback and named insecure
// registries (the base transport answers without any network).
func TestPolicyTransport(t *testing.T) {
	pt := &policyTransport{base: okTransport{}, insecure: []string{"lab.invalid:5000"}}
	for url, ok := range map[string]bool{
		"http://127.0.0.1:5000/v2/": true, "http://localhost:5000/v2/": true, "http://[::1]:5000/v2/": true,
		"http://lab.invalid:5000/v2/": true, "https://remote.invalid/v2/": true,
		"http://remote.invalid/v2/": false, "http://remote.invalid:5000/v2/": false,
	} {
		req, _ := http.NewRequest("GET", url, nil)
		_, err := pt.RoundTrip(req)
		if ok && err != nil || !ok && !errors.Is(err, ErrPlainHTTP) {
			t.Errorf("%s: %v, want allowed=%v", url, err, ok)
		}
	}
}
