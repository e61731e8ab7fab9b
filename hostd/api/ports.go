package api

import (
	"net/http"
	"net/url"
	"time"
)

// Ports issues access to service URLs (*portproxy.Proxy implements it).
type Ports interface {
	// URLs are the host-based ("" without a domain) and path-based URLs of
	// a sandbox's port for a client that reached hostd at origin.
	URLs(origin *url.URL, id string, port int) (host, path string)
	// Token is the sandbox's access token.
	Token(id string) string
	Public(id string, port int) bool
	SetPublic(id string, port int, public bool) error
	// ShareTokenBy signs a share link that expires after ttl, minted by
	// key keyID (the link dies with the key).
	ShareTokenBy(id string, port int, ttl time.Duration, keyID string) (string, time.Time, error)
	// Forget drops what is kept about a deleted sandbox.
	Forget(id string) error
}

const (
	defaultShareTTL = time.Hour
	maxShareTTL     = 30 * 24 * time.Hour
)

var errNoPorts = &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this hostd serves no service URLs"}

// CodeNotSupported answers routes of a feature this hostd was built without.
const CodeNotSupported = "not_supported"

// origin is hostd as the client reached it.
func origin(r *http.Request) *url.URL {
	u := &url.URL{Scheme: "http", Host: r.Host}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	return u
}

// portAccess checks the sandbox exists and describes its port.
func (s *server) portAccess(r *http.Request, id string, port int) (PortAccess, error) {
	if s.ports == nil {
		return PortAccess{}, errNoPorts
	}
	if port < 1 || port > 65535 {
		return PortAccess{}, badRequest(CodeInvalidParam, "port %d out of range", port)
	}
	if _, err := s.m.Get(r.Context(), id); err != nil {
		return PortAccess{}, err
	}
	host, path := s.ports.URLs(origin(r), id, port)
	return PortAccess{Port: port, URL: host, PathURL: path, Token: s.ports.Token(id), Public: s.ports.Public(id, port)}, nil
}

func (s *server) GetPort(w http.ResponseWriter, r *http.Request, id SandboxID, port Port) {
	pa, err := s.portAccess(r, id, port)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, pa)
}

func (s *server) SetPort(w http.ResponseWriter, r *http.Request, id SandboxID, port Port) {
	var req PortSettings
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := s.portAccess(r, id, port); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.ports.SetPublic(id, port, req.Public); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.GetPort(w, r, id, port)
}

func (s *server) CreateShareLink(w http.ResponseWriter, r *http.Request, id SandboxID, port Port) {
	var req ShareLinkRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	ttl, err := seconds("expires_in_s", req.ExpiresInS, maxShareS)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ttl == 0 {
		ttl = defaultShareTTL
	}
	pa, err := s.portAccess(r, id, port)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	tok, exp, err := s.ports.ShareTokenBy(id, port, ttl, caller(r.Context()).ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	link := ShareLink{PathURL: withToken(pa.PathURL, tok), Token: tok, ExpiresAt: exp.UTC()}
	if pa.URL != "" {
		link.URL = withToken(pa.URL, tok)
	}
	writeJSON(w, http.StatusCreated, link)
}

func withToken(u, tok string) string { return u + "?token=" + url.QueryEscape(tok) }

// forgetPorts drops a deleted sandbox's port settings.
func (s *server) forgetPorts(r *http.Request, id string) {
	if s.ports == nil {
		return
	}
	if err := s.ports.Forget(id); err != nil {
		s.log.ErrorContext(r.Context(), "forget ports", "sandbox_id", id, "err", err)
	}
}
