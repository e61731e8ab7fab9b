package api

import (
	"context"
	"net/http"
)

// Identifier is an Authenticator that also names the request's API key,
// for per-key maximums (*auth.Authenticator implements it).
type Identifier interface {
	Identify(r *http.Request) (name string, err error)
}

type keyNameKey struct{}

// keyHolder is put in every request's context before routing, and filled
// in once the key is known (the router logs the request it started with).
type keyHolder struct{ name string }

func withKeyHolder(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), keyNameKey{}, &keyHolder{}))
}

// KeyName is the name of the API key that authenticated the request of
// ctx ("" when unknown).
func KeyName(ctx context.Context) string {
	if h, ok := ctx.Value(keyNameKey{}).(*keyHolder); ok {
		return h.name
	}
	return ""
}

// identify authenticates r and records its key's name in its context when
// the authenticator can name keys.
func (rt *router) identify(r *http.Request) error {
	id, ok := rt.auth.(Identifier)
	if !ok {
		return rt.authenticate(r)
	}
	name, err := id.Identify(r)
	if err != nil {
		return err
	}
	if h, ok := r.Context().Value(keyNameKey{}).(*keyHolder); ok {
		h.name = name
	}
	return nil
}
