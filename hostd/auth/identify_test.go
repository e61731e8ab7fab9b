package auth_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/store"
)

var _ auth.KeyNamer = (*store.Store)(nil)

func TestIdentify(t *testing.T) {
	st := openStore(t)
	key, _ := auth.NewKey()
	if err := st.AddAPIKey(context.Background(), "team-a", auth.Hash(key)); err != nil {
		t.Fatal(err)
	}
	a := auth.New(st)
	tests := []struct {
		name, header, want string
		wantErr            error
	}{
		{name: "known key", header: "Bearer " + key, want: "team-a"},
		{name: "unknown key", header: "Bearer ab_nope", wantErr: auth.ErrUnauthorized},
		{name: "no header", wantErr: auth.ErrUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			got, err := a.Identify(r)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %q, %v, want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// failingNamer is a key store whose lookups fail.
type failingNamer struct{ err error }

func (f failingNamer) AddAPIKey(context.Context, string, string) error { return f.err }
func (f failingNamer) HasAPIKey(context.Context, string) (bool, error) { return false, f.err }
func (f failingNamer) APIKeyName(context.Context, string) (string, error) {
	return "", f.err
}

// A store that fails is not an unknown key: the caller answers 500, not 401.
func TestIdentifyStoreError(t *testing.T) {
	broken := errors.New("disk gone")
	a := auth.New(failingNamer{err: broken})
	r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
	r.Header.Set("Authorization", "Bearer ab_key")
	_, err := a.Identify(r)
	if !errors.Is(err, broken) || errors.Is(err, auth.ErrUnauthorized) {
		t.Fatalf("got %v, want the store's error and not ErrUnauthorized", err)
	}
}
