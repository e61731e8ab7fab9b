// Package auth manages hostd's API keys: it makes them, keeps only their
// SHA-256 hashes in the store, bootstraps the first key into the data
// directory, and checks the bearer key of each API request.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrUnauthorized is wrapped by every rejection of a request's key.
var ErrUnauthorized = errors.New("auth: missing or invalid API key")

// KeyPrefix starts every key that NewKey makes.
const KeyPrefix = "ab_"

// maxKeyLen bounds the bearer token that is hashed and looked up.
const maxKeyLen = 512

// KeyStore holds API key hashes. *store.Store implements it.
type KeyStore interface {
	// AddAPIKey stores hash under name; adding a stored hash does nothing.
	AddAPIKey(ctx context.Context, name, hash string) error
	// HasAPIKey reports whether hash is stored.
	HasAPIKey(ctx context.Context, hash string) (bool, error)
}

// NewKey returns a fresh key: KeyPrefix and 32 random bytes in unpadded
// base64url.
func NewKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("auth: new key: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Hash is the form in which a key is stored: its SHA-256 in hex.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Authenticator checks requests' bearer keys against a KeyStore.
type Authenticator struct {
	keys    KeyStore
	touched touched
}

// New returns an Authenticator that accepts the keys whose hashes ks holds.
func New(ks KeyStore) *Authenticator {
	return &Authenticator{keys: ks}
}

// Authenticate returns nil if r carries `Authorization: Bearer <key>` with a
// stored key, an error wrapping ErrUnauthorized if it does not, or the
// store's error if the lookup failed.
//
// Only the key's SHA-256 is looked up, so the lookup's timing tells a
// caller nothing about the stored keys; the key itself is never compared.
func (a *Authenticator) Authenticate(r *http.Request) error {
	key, err := bearer(r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	ok, err := a.keys.HasAPIKey(r.Context(), Hash(key))
	switch {
	case err != nil:
		return fmt.Errorf("auth: %w", err)
	case !ok:
		return fmt.Errorf("%w: unknown key", ErrUnauthorized)
	}
	return nil
}

// bearer extracts the token of an Authorization header value.
func bearer(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("%w: no Authorization header", ErrUnauthorized)
	}
	scheme, token, _ := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	switch {
	case !strings.EqualFold(scheme, "Bearer"):
		return "", fmt.Errorf("%w: Authorization is not a Bearer token", ErrUnauthorized)
	case token == "":
		return "", fmt.Errorf("%w: empty bearer token", ErrUnauthorized)
	case len(token) > maxKeyLen:
		return "", fmt.Errorf("%w: bearer token too long", ErrUnauthorized)
	}
	return token, nil
}
