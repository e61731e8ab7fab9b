package api

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/hostd/store"
)

// Identifier is an Authenticator that also names the request's API key,
// for per-key maximums (*auth.Authenticator implements it).
type Identifier interface {
	Identify(r *http.Request) (name string, err error)
}

// Principals is an Authenticator that returns the record of the request's
// key: its id, project and role (*auth.Authenticator implements it). With
// an Authenticator that is not one, every key is an admin of the default
// project.
type Principals interface {
	Principal(r *http.Request) (store.APIKey, error)
	// Check returns an error wrapping auth.ErrUnauthorized once key id is
	// revoked or expired.
	Check(ctx context.Context, id string) error
}

type keyNameKey struct{}

// keyHolder is put in every request's context before routing, and filled
// in once the key is known (the router logs the request it started with).
type keyHolder struct{ key store.APIKey }

func withKeyHolder(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), keyNameKey{}, &keyHolder{}))
}

// KeyName is the name of the API key that authenticated the request of
// ctx ("" when unknown).
func KeyName(ctx context.Context) string {
	return caller(ctx).Name
}

// KeyID is the id of the API key that authenticated the request of ctx,
// or its name when the key has no id ("" when unknown): what the flight
// recorder and the API log name a call's key by, never the key itself.
func KeyID(ctx context.Context) string {
	if k := caller(ctx); k.ID != "" {
		return k.ID
	}
	return KeyName(ctx)
}

// caller is the record of the key of ctx's request (zero when unknown).
func caller(ctx context.Context) store.APIKey {
	if h, ok := ctx.Value(keyNameKey{}).(*keyHolder); ok {
		return h.key
	}
	return store.APIKey{}
}

// identify authenticates r and records its key in its context.
func (rt *router) identify(r *http.Request) error {
	var k store.APIKey
	switch a := rt.auth.(type) {
	case Principals:
		var err error
		if k, err = a.Principal(r); err != nil {
			return err
		}
	case Identifier:
		name, err := a.Identify(r)
		if err != nil {
			return err
		}
		k = store.APIKey{Name: name, Project: store.DefaultProject, Role: store.RoleAdmin}
	default:
		if err := rt.authenticate(r); err != nil {
			return err
		}
		k = store.APIKey{Project: store.DefaultProject, Role: store.RoleAdmin}
	}
	if h, ok := r.Context().Value(keyNameKey{}).(*keyHolder); ok {
		h.key = k
	}
	return nil
}
