package oci

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// registryError wraps what pulling ref from its registry returned: a
// refusal of the credentials as ErrRegistryAuth, anything else as
// ErrRegistry.
func registryError(ref string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		if te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden {
			return fmt.Errorf("%w: pull %s: %w", ErrRegistryAuth, ref, err)
		}
		for _, d := range te.Errors {
			if d.Code == transport.UnauthorizedErrorCode || d.Code == transport.DeniedErrorCode {
				return fmt.Errorf("%w: pull %s: %w", ErrRegistryAuth, ref, err)
			}
		}
	}
	return fmt.Errorf("%w: pull %s: %w", ErrRegistry, ref, err)
}
