package auth

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/agentbox/agentbox/hostd/store"
)

// Fixed accepts its one token, as its key, and refuses every other.
func TestFixedAcceptsOnlyItsToken(t *testing.T) {
	f := NewFixed("abh_tok", store.APIKey{Name: "fleet", Project: store.DefaultProject, Role: store.RoleAdmin})
	for _, tc := range []struct {
		header string
		ok     bool
	}{{"Bearer abh_tok", true}, {"Bearer abh_to", false}, {"Bearer ab_datadirkey", false}, {"", false}, {"Basic abh_tok", false}} {
		r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		k, err := f.Principal(r)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrUnauthorized)) {
			t.Errorf("%q: %v", tc.header, err)
		}
		if tc.ok && (k.Role != store.RoleAdmin || k.Project != store.DefaultProject) {
			t.Errorf("%q: key %+v", tc.header, k)
		}
	}
}
