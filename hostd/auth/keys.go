package auth

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/hostd/store"
)

// PrefixLen is how many characters of a key after KeyPrefix are kept in
// clear, to recognise a leaked key in the list of keys.
const PrefixLen = 8

// touchEvery bounds how often a key's last use is written.
const touchEvery = time.Minute

// KeyRecords holds the records of keys (*store.Store implements it).
type KeyRecords interface {
	APIKeyByHash(ctx context.Context, hash string) (store.APIKey, error)
	GetAPIKey(ctx context.Context, id string) (store.APIKey, error)
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

// touched remembers when each key's last use was written.
type touched struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (t *touched) due(id string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	if now.Sub(t.at[id]) < touchEvery {
		return false
	}
	t.at[id] = now
	return true
}

// Principal returns the record of r's key: its id, name, project and role.
// A key that is unknown, revoked or expired is an error wrapping
// ErrUnauthorized. A KeyStore that keeps no records (a test's) names every
// key an admin of the default project.
func (a *Authenticator) Principal(r *http.Request) (store.APIKey, error) {
	kr, ok := a.keys.(KeyRecords)
	if !ok {
		name, err := a.Identify(r)
		return store.APIKey{Name: name, Project: store.DefaultProject, Role: store.RoleAdmin}, err
	}
	key, err := bearer(r.Header.Get("Authorization"))
	if err != nil {
		return store.APIKey{}, err
	}
	k, err := kr.APIKeyByHash(r.Context(), Hash(key))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.APIKey{}, fmt.Errorf("%w: unknown key", ErrUnauthorized)
	case err != nil:
		return store.APIKey{}, fmt.Errorf("auth: %w", err)
	}
	now := time.Now()
	if err := usable(k, now); err != nil {
		return store.APIKey{}, err
	}
	if a.touched.due(k.ID, now) {
		// A failed write of the last use does not refuse the call.
		_ = kr.TouchAPIKey(context.WithoutCancel(r.Context()), k.ID, now)
	}
	return k, nil
}

// Check returns nil while key id may still be used, an error wrapping
// ErrUnauthorized once it is revoked or expired (long-lived streams call it
// every few seconds), or the store's error.
func (a *Authenticator) Check(ctx context.Context, id string) error {
	kr, ok := a.keys.(KeyRecords)
	if !ok || id == "" {
		return nil
	}
	k, err := kr.GetAPIKey(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: unknown key", ErrUnauthorized)
	case err != nil:
		return fmt.Errorf("auth: %w", err)
	}
	return usable(k, time.Now())
}

func usable(k store.APIKey, now time.Time) error {
	switch {
	case !k.RevokedAt.IsZero():
		return fmt.Errorf("%w: key %s is revoked", ErrUnauthorized, k.ID)
	case !k.Valid(now):
		return fmt.Errorf("%w: key %s expired", ErrUnauthorized, k.ID)
	}
	return nil
}

// NewRecord makes a fresh key and its record (id, prefix, created now) for
// project and role; the caller stores the record under Hash(key) and shows
// the key once.
func NewRecord(name, project, role string, expires time.Time) (key string, rec store.APIKey, err error) {
	if key, err = NewKey(); err != nil {
		return "", rec, err
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", rec, fmt.Errorf("auth: new key id: %w", err)
	}
	rec = store.APIKey{ID: "key_" + hex.EncodeToString(id[:]), Name: name, Prefix: VisiblePrefix(key),
		Project: project, Role: role, CreatedAt: time.Now().UTC(), ExpiresAt: expires}
	return key, rec, nil
}

// VisiblePrefix is the part of key kept in clear: PrefixLen characters
// after KeyPrefix ("" for a key too short to spare them).
func VisiblePrefix(key string) string {
	rest, ok := cutPrefix(key)
	if !ok || len(rest) < 2*PrefixLen {
		return ""
	}
	return rest[:PrefixLen]
}

func cutPrefix(key string) (string, bool) {
	if len(key) < len(KeyPrefix) || key[:len(KeyPrefix)] != KeyPrefix {
		return "", false
	}
	return key[len(KeyPrefix):], true
}
