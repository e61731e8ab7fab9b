package auth

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/hostd/store"
)

// Fixed accepts one bearer token and nothing else, as the principal key:
// a host of a fleet accepts only its host token (fleet/hosttoken), as an
// admin of the default project, and refuses its data directory's key and
// every stored one.
type Fixed struct {
	token string
	key   store.APIKey
}

// NewFixed returns an authenticator that accepts only token, as key.
func NewFixed(token string, key store.APIKey) *Fixed {
	return &Fixed{token: token, key: key}
}

// Authenticate returns nil if r carries the token.
func (f *Fixed) Authenticate(r *http.Request) error {
	_, err := f.Principal(r)
	return err
}

// Principal returns the token's key if r carries the token.
func (f *Fixed) Principal(r *http.Request) (store.APIKey, error) {
	tok, err := bearer(r.Header.Get("Authorization"))
	if err != nil {
		return store.APIKey{}, err
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(f.token)) != 1 {
		return store.APIKey{}, fmt.Errorf("%w: this host accepts only its fleet host token", ErrUnauthorized)
	}
	return f.key, nil
}

// Identify returns the token's key's name if r carries the token.
func (f *Fixed) Identify(r *http.Request) (string, error) {
	k, err := f.Principal(r)
	return k.Name, err
}

// Check accepts the token's key for as long as the host runs.
func (f *Fixed) Check(context.Context, string) error { return nil }
