package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/secrets"
	"github.com/agentbox/agentbox/hostd/store"
)

// NetworkManager is what the network routes need of the sandbox manager.
type NetworkManager interface {
	NetworkPolicy(ctx context.Context, id string) (egress.Policy, error)
	SetNetworkPolicy(ctx context.Context, id string, pol egress.Policy) (egress.Policy, error)
}

// SecretStore is what the secrets routes need (hostd/secrets implements it).
// Nothing here returns a value.
type SecretStore interface {
	Put(ctx context.Context, name string, value []byte) error
	List(ctx context.Context) ([]store.SecretMeta, error)
	Delete(ctx context.Context, name string) error
}

var (
	_ NetworkManager = sandbox.Service{}
	_ SecretStore    = (*secrets.Box)(nil)
)

// Codes of the network and secrets routes.
const (
	CodeSecretNotFound = "secret_not_found"
	CodeNotImplemented = "not_implemented"
)

var errNoNetwork = &apiError{status: http.StatusNotImplemented, code: CodeNotImplemented, msg: "this hostd serves no network or secrets routes"}

// toPolicy turns the create body's network object into a policy.
func toPolicy(in *NetworkPolicyInput) *egress.Policy {
	if in == nil {
		return nil
	}
	p := &egress.Policy{AllowDomains: in.AllowDomains, AllowCIDRs: in.AllowCidrs, AllowPorts: in.AllowPorts}
	if in.Mode != nil {
		p.Mode = egress.Mode(*in.Mode)
	}
	for _, r := range in.Inject {
		p.Inject = append(p.Inject, egress.InjectRule{Host: r.Host, Header: r.Header, Value: r.Value, Kind: injectKind(r.Kind)})
	}
	return p
}

func fromPolicy(p egress.Policy) NetworkPolicy {
	out := NetworkPolicy{Mode: NetworkMode(p.Mode), AllowDomains: nonNilS(p.AllowDomains), AllowCidrs: nonNilS(p.AllowCIDRs),
		AllowPorts: p.AllowPorts, Inject: []InjectRule{}}
	if len(out.AllowPorts) == 0 {
		out.AllowPorts = egress.DefaultPorts
	}
	if p.Mode == egress.ModeNone {
		out.AllowPorts = []int{}
	}
	for _, r := range p.Inject {
		out.Inject = append(out.Inject, InjectRule{Host: r.Host, Header: r.Header, Value: r.Value, Kind: InjectRuleKind(r.Kind)})
	}
	return out
}

func nonNilS(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (s *server) GetSandboxNetwork(w http.ResponseWriter, r *http.Request, id SandboxID) {
	if s.net == nil {
		s.writeError(w, r, errNoNetwork)
		return
	}
	p, err := s.net.NetworkPolicy(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fromPolicy(p))
}

func (s *server) PatchSandboxNetwork(w http.ResponseWriter, r *http.Request, id SandboxID) {
	if s.net == nil {
		s.writeError(w, r, errNoNetwork)
		return
	}
	var req NetworkPolicyPatch
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.net.NetworkPolicy(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.AllowDomains != nil {
		p.AllowDomains = *req.AllowDomains
	}
	if req.AllowCidrs != nil {
		p.AllowCIDRs = *req.AllowCidrs
	}
	if req.AllowPorts != nil {
		p.AllowPorts = *req.AllowPorts
	}
	if req.Inject != nil {
		p.Inject = nil
		var names []string
		for _, r := range *req.Inject {
			p.Inject = append(p.Inject, egress.InjectRule{Host: r.Host, Header: r.Header, Value: r.Value, Kind: injectKind(r.Kind)})
			names = append(names, p.Inject[len(p.Inject)-1].Secrets()...)
		}
		if err := s.secretsExist(r.Context(), names); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	p, err = s.net.SetNetworkPolicy(r.Context(), id, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fromPolicy(p))
}

func (s *server) CreateSecret(w http.ResponseWriter, r *http.Request) {
	if s.secrets == nil {
		s.writeError(w, r, errNoNetwork)
		return
	}
	var req CreateSecretRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.claim(r.Context(), store.KindSecret, req.Name, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.secrets.Put(r.Context(), req.Name, []byte(req.Value)); err != nil {
		if !s.exists(r.Context(), store.KindSecret, req.Name) {
			s.disown(r.Context(), store.KindSecret, req.Name)
		}
		s.writeError(w, r, secretError(err))
		return
	}
	list, err := s.secrets.List(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	for _, m := range list {
		if m.Name == req.Name {
			writeJSON(w, http.StatusCreated, SecretInfo{Name: m.Name, CreatedAt: m.CreatedAt})
			return
		}
	}
	s.writeError(w, r, errors.New("secret vanished after it was stored"))
}

func (s *server) ListSecrets(w http.ResponseWriter, r *http.Request, params ListSecretsParams) {
	if s.secrets == nil {
		s.writeError(w, r, errNoNetwork)
		return
	}
	shown, err := s.scope(r.Context(), store.KindSecret, params.Project)
	var list []store.SecretMeta
	if err == nil {
		list, err = s.secrets.List(r.Context())
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := SecretList{Secrets: make([]SecretInfo, 0, len(list))}
	for _, m := range list {
		if shown(m.Name) {
			out.Secrets = append(out.Secrets, SecretInfo{Name: m.Name, CreatedAt: m.CreatedAt})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) DeleteSecret(w http.ResponseWriter, r *http.Request, name string) {
	if s.secrets == nil {
		s.writeError(w, r, errNoNetwork)
		return
	}
	if err := s.secrets.Delete(r.Context(), name); err != nil {
		s.writeError(w, r, secretError(err))
		return
	}
	s.disown(r.Context(), store.KindSecret, name)
	w.WriteHeader(http.StatusNoContent)
}

// secretError maps the secrets package's errors to API errors.
func secretError(err error) error {
	switch {
	case errors.Is(err, secrets.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: CodeSecretNotFound, msg: "no such secret", err: err}
	case errors.Is(err, secrets.ErrInvalid):
		return &apiError{status: http.StatusBadRequest, code: CodeInvalidRequest, msg: "bad secret", err: err}
	}
	return err
}

// injectKind is the egress kind of an API rule kind ("header" is the
// default, "").
func injectKind(k InjectRuleKind) string {
	if k == "header" {
		return ""
	}
	return string(k)
}
