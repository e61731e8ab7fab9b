package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/fleet/store"
)

// keyTTL bounds how long a cached key is trusted without hearing of it:
// NOTIFY ends it at once; this bounds a notification that was lost.
const keyTTL = 30 * time.Second

// maxKeyLen bounds the bearer token that is hashed and looked up.
const maxKeyLen = 512

// keyStore is what the key cache needs of the store.
type keyStore interface {
	KeyByHash(ctx context.Context, hash string) (store.APIKey, error)
	Listen(ctx context.Context, channel string, ready func(), fn func(string)) error
	TouchKey(ctx context.Context, id string, at time.Time) error
}

// keyCache holds the keys recently used on this replica, and the
// requests in flight of each, which end when their key is revoked.
type keyCache struct {
	st      keyStore
	timeout time.Duration

	mu       sync.Mutex
	byHash   map[string]cachedKey
	listened bool // a LISTEN is in place: cached keys are trusted for keyTTL
	inflight map[string]map[*int]context.CancelFunc
}

type cachedKey struct {
	key store.APIKey
	at  time.Time
}

func newKeyCache(st keyStore, timeout time.Duration) *keyCache {
	return &keyCache{st: st, timeout: timeout, byHash: map[string]cachedKey{}, inflight: map[string]map[*int]context.CancelFunc{}}
}

// hashKey is the form in which keys are stored: SHA-256 in hex.
func hashKey(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

// principal returns the record of r's bearer key, or an error that the
// caller answers 401 (or 503 when the database cannot tell).
func (c *keyCache) principal(r *http.Request) (store.APIKey, string, error) {
	h := r.Header.Get("Authorization")
	scheme, token, _ := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if h == "" || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > maxKeyLen {
		return store.APIKey{}, "", errorf(http.StatusUnauthorized, CodeUnauthorized, "missing or invalid API key (Authorization: Bearer <key>)")
	}
	hash := hashKey(token)
	now := time.Now()
	c.mu.Lock()
	ck, ok := c.byHash[hash]
	fresh := ok && c.listened && now.Sub(ck.at) < keyTTL
	c.mu.Unlock()
	if !fresh {
		ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
		k, err := c.st.KeyByHash(ctx, hash)
		cancel()
		switch {
		case errors.Is(err, store.ErrNotFound):
			return store.APIKey{}, "", errorf(http.StatusUnauthorized, CodeUnauthorized, "unknown API key")
		case err != nil:
			return store.APIKey{}, "", err
		}
		if k.LastUsed == nil || now.Sub(*k.LastUsed) > time.Minute {
			tctx, tcancel := context.WithTimeout(context.WithoutCancel(r.Context()), c.timeout)
			_ = c.st.TouchKey(tctx, k.ID, now)
			tcancel()
			k.LastUsed = &now
		}
		ck = cachedKey{key: k, at: now}
		c.mu.Lock()
		c.byHash[hash] = ck
		c.mu.Unlock()
	}
	if !ck.key.Usable(now) {
		return store.APIKey{}, "", errorf(http.StatusUnauthorized, CodeUnauthorized, "API key %s is revoked or expired", ck.key.ID)
	}
	return ck.key, hash, nil
}

// track registers a request in flight under its key's hash; its context
// ends when the key is revoked. The returned func unregisters it.
func (c *keyCache) track(ctx context.Context, hash string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	tok := new(int)
	c.mu.Lock()
	if c.inflight[hash] == nil {
		c.inflight[hash] = map[*int]context.CancelFunc{}
	}
	c.inflight[hash][tok] = cancel
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(c.inflight[hash], tok)
		if len(c.inflight[hash]) == 0 {
			delete(c.inflight, hash)
		}
		c.mu.Unlock()
		cancel()
	}
}

// revoked forgets a key and ends its requests in flight.
func (c *keyCache) revoked(hash string) {
	c.mu.Lock()
	delete(c.byHash, hash)
	for _, cancel := range c.inflight[hash] {
		cancel()
	}
	c.mu.Unlock()
}

// listen follows KeysChannel until ctx ends. While it is not listening,
// every request looks its key up again, so no revocation is missed.
func (c *keyCache) listen(ctx context.Context, log *slog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.st.Listen(ctx, store.KeysChannel, func() {
			c.mu.Lock()
			c.listened = true
			c.byHash = map[string]cachedKey{} // what changed while deaf is unknown
			c.mu.Unlock()
			backoff = 100 * time.Millisecond
		}, c.revoked)
		c.mu.Lock()
		c.listened = false
		c.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		log.Warn("key revocations: listen lost; looking every key up until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// newKey returns a fresh API key in hostd's form and its id and prefix.
func newKey() (key, id, prefix string) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	key = "ab_" + base64.RawURLEncoding.EncodeToString(b[:])
	var i [8]byte
	_, _ = rand.Read(i[:])
	return key, "key_" + hex.EncodeToString(i[:]), key[3:11]
}
