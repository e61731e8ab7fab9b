package portproxy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Errors of authorization, answered 401 and 403.
var (
	ErrUnauthorized = errors.New("portproxy: no valid credential for this service URL")
	ErrExpired      = errors.New("portproxy: the share link has expired")
)

// Where a credential may be presented, besides the API key in
// Authorization: Bearer.
const (
	// TokenHeader carries an access token or share-link token.
	TokenHeader = "X-Agentbox-Token"
	// TokenParam in the query is turned into a cookie on the first visit.
	TokenParam = "token"
	// CookieName is the cookie that TokenParam sets, scoped to the service
	// URL's host (host-based) or path (path-based).
	CookieName = "agentbox_token"
)

// grant is a successful authorization.
type grant struct {
	// cookie, if set, is to be sent back (a first visit with ?token=).
	cookie *http.Cookie
	// viaAuthorization: the Authorization header carried the credential.
	viaAuthorization bool
}

// authorize decides whether r may open t: a public port, the API key or a
// token in Authorization, a token in TokenHeader, TokenParam or the cookie.
// An expired share link is ErrExpired, anything else ErrUnauthorized.
func (p *Proxy) authorize(r *http.Request, t target) (grant, error) {
	if p.public.is(t.sandbox, t.port) {
		return grant{}, nil
	}
	sawExpired := false
	judge := func(cred string) (bool, time.Time) {
		v, exp, keyID := p.sign.checkShare(cred, t.sandbox, t.port)
		if v == valid && keyID != "" && !p.keyLives(r, keyID) {
			v = invalid
		}
		sawExpired = sawExpired || v == expired
		return v == valid, exp
	}
	if cred, ok := bearer(r.Header.Get("Authorization")); ok {
		if ok, _ := judge(cred); ok {
			return grant{viaAuthorization: true}, nil
		}
		if p.auth != nil && p.authorizeKey(r, t.sandbox) == nil {
			return grant{viaAuthorization: true}, nil
		}
	}
	if ok, _ := judge(r.Header.Get(TokenHeader)); ok {
		return grant{}, nil
	}
	if cred := r.URL.Query().Get(TokenParam); cred != "" {
		if ok, exp := judge(cred); ok {
			return grant{cookie: p.cookie(r, t, cred, exp)}, nil
		}
	}
	for _, c := range r.CookiesNamed(CookieName) {
		if ok, _ := judge(c.Value); ok {
			return grant{}, nil
		}
	}
	if sawExpired {
		return grant{}, ErrExpired
	}
	return grant{}, ErrUnauthorized
}

// SandboxAuthenticator is an Authenticator that also decides whether the
// request's key may reach sandbox id (its project owns it); an
// Authenticator that is not one accepts any valid key for every sandbox.
type SandboxAuthenticator interface {
	AuthenticateFor(r *http.Request, id string) error
}

// KeyChecker is an Authenticator that tells whether the key that minted a
// share link still lives (*auth.Authenticator implements it): a link dies
// with its key. With one that is not, links live until they expire.
type KeyChecker interface {
	Check(ctx context.Context, keyID string) error
}

func (p *Proxy) keyLives(r *http.Request, keyID string) bool {
	kc, ok := p.auth.(KeyChecker)
	return !ok || kc.Check(r.Context(), keyID) == nil
}

func (p *Proxy) authorizeKey(r *http.Request, id string) error {
	if sa, ok := p.auth.(SandboxAuthenticator); ok {
		return sa.AuthenticateFor(r, id)
	}
	return p.auth.Authenticate(r)
}

// cookie holds cred for later requests to t's URL; a share link's cookie
// expires with the link.
func (p *Proxy) cookie(r *http.Request, t target, cred string, exp time.Time) *http.Cookie {
	c := &http.Cookie{Name: CookieName, Value: cred, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil, Expires: exp}
	if t.pathBased {
		c.Path = t.prefix + "/"
	}
	return c
}

// bearer returns the token of an "Authorization: Bearer" value.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	return tok, ok && strings.EqualFold(scheme, "Bearer") && tok != ""
}

// isOurs reports whether cred has the form of a token this proxy issues.
func isOurs(cred string) bool {
	return strings.HasPrefix(cred, tokenPrefix) || strings.HasPrefix(cred, sharePrefix)
}

// stripCredentials removes hostd's credentials from a request bound for
// the guest: code in the sandbox must never see the API key or a token.
func stripCredentials(out *http.Request, t target) {
	if t.stripAuthorization {
		out.Header.Del("Authorization")
	}
	out.Header.Del(TokenHeader)
	if q := out.URL.Query(); isOurs(q.Get(TokenParam)) {
		q.Del(TokenParam)
		out.URL.RawQuery = q.Encode()
	}
	if len(out.CookiesNamed(CookieName)) == 0 {
		return
	}
	var keep []string
	for _, c := range out.Cookies() {
		if c.Name != CookieName {
			keep = append(keep, c.String())
		}
	}
	out.Header.Del("Cookie")
	if len(keep) > 0 {
		out.Header.Set("Cookie", strings.Join(keep, "; "))
	}
}
