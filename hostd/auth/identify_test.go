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
