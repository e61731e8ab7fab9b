package oci

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func TestRegistryError(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"401", &transport.Error{StatusCode: http.StatusUnauthorized}, ErrRegistryAuth},
		{"403", &transport.Error{StatusCode: http.StatusForbidden}, ErrRegistryAuth},
		{"denied code", &transport.Error{StatusCode: http.StatusBadRequest, Errors: []transport.Diagnostic{{Code: transport.DeniedErrorCode}}}, ErrRegistryAuth},
		{"404", &transport.Error{StatusCode: http.StatusNotFound, Errors: []transport.Diagnostic{{Code: transport.ManifestUnknownErrorCode}}}, ErrRegistry},
		{"unreachable", errors.New("dial tcp: connection refused"), ErrRegistry},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := registryError("r/x:1", tc.err)
			if !errors.Is(err, tc.want) || !errors.Is(err, tc.err) {
				t.Errorf("got %v, want %v wrapping the cause", err, tc.want)
			}
			if tc.want == ErrRegistry && errors.Is(err, ErrRegistryAuth) {
				t.Errorf("got %v, want no auth error", err)
			}
		})
	}
}
