package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/hostd/store"
)

// KeyNamer names stored keys. *store.Store implements it.
type KeyNamer interface {
	// APIKeyName returns the name stored with hash, or an error wrapping
	// store.ErrNotFound when none is stored.
	APIKeyName(ctx context.Context, hash string) (string, error)
}

// Identify is Authenticate that also returns the name of the request's key
// (for per-key limits), in one lookup. It needs a KeyStore that is also a
// KeyNamer; otherwise the name is "".
func (a *Authenticator) Identify(r *http.Request) (string, error) {
	kn, ok := a.keys.(KeyNamer)
	if !ok {
		return "", a.Authenticate(r)
	}
	key, err := bearer(r.Header.Get("Authorization"))
	if err != nil {
		return "", err
	}
	name, err := kn.APIKeyName(r.Context(), Hash(key))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", fmt.Errorf("%w: unknown key", ErrUnauthorized)
	case err != nil:
		return "", fmt.Errorf("auth: %w", err)
	}
	return name, nil
}
