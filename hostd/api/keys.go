package api

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/store"
)

// projectName is the pattern of the spec's CreateProjectRequest.name.
var projectName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

var errNoTenancy = &apiError{status: http.StatusNotImplemented, code: CodeNotImplemented, msg: "this hostd keeps no projects or keys"}

func (s *server) requireAdmin(ctx context.Context) error {
	if s.tenancy == nil {
		return errNoTenancy
	}
	if !isAdmin(ctx) {
		return forbidden("only an admin key may do this")
	}
	return nil
}

func (s *server) CreateProject(w http.ResponseWriter, r *http.Request) {
	var req CreateProjectRequest
	err := decodeJSON(w, r, maxJSONBody, &req, false)
	if err == nil {
		err = s.requireAdmin(r.Context())
	}
	if err == nil && !projectName.MatchString(req.Name) {
		err = badRequest(CodeInvalidRequest, "a project name is 1 to 63 of a-z, 0-9, _ and -, starting with a letter or digit")
	}
	var p store.Project
	if err == nil {
		p, err = s.tenancy.CreateProject(r.Context(), req.Name)
	}
	if errors.Is(err, store.ErrExists) {
		err = &apiError{status: http.StatusConflict, code: CodeProjectExists, msg: "project " + req.Name + " exists", err: err}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, Project{Name: p.Name, CreatedAt: p.CreatedAt})
}

func (s *server) ListProjects(w http.ResponseWriter, r *http.Request) {
	if err := s.requireAdmin(r.Context()); err != nil {
		s.writeError(w, r, err)
		return
	}
	ps, err := s.tenancy.ListProjects(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := ProjectList{Projects: make([]Project, 0, len(ps))}
	for _, p := range ps {
		out.Projects = append(out.Projects, Project{Name: p.Name, CreatedAt: p.CreatedAt})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) CreateKey(w http.ResponseWriter, r *http.Request) {
	var req CreateKeyRequest
	err := decodeJSON(w, r, maxJSONBody, &req, false)
	if err == nil {
		err = s.requireAdmin(r.Context())
	}
	var expires time.Time
	switch {
	case err != nil:
	case len(req.Name) > 128:
		err = badRequest(CodeInvalidRequest, "a key name is at most 128 bytes")
	case req.ExpiresInS < 0:
		err = badRequest(CodeInvalidRequest, "expires_in_s must not be negative")
	case req.ExpiresInS > 0 && req.ExpiresAt != nil:
		err = badRequest(CodeInvalidRequest, "give expires_in_s or expires_at, not both")
	case req.ExpiresInS > 0:
		expires = time.Now().Add(time.Duration(req.ExpiresInS) * time.Second)
	case req.ExpiresAt != nil && !req.ExpiresAt.After(time.Now()):
		err = badRequest(CodeInvalidRequest, "expires_at is in the past")
	case req.ExpiresAt != nil:
		expires = *req.ExpiresAt
	}
	role := string(req.Role)
	if role == "" {
		role = store.RoleMember
	}
	project := req.Project
	if project == "" {
		project = caller(r.Context()).Project
	}
	var key string
	var rec store.APIKey
	if err == nil {
		key, rec, err = auth.NewRecord(req.Name, project, role, expires)
	}
	if err == nil {
		err = s.tenancy.CreateAPIKey(r.Context(), rec, auth.Hash(key))
	}
	if errors.Is(err, store.ErrNotFound) {
		err = &apiError{status: http.StatusNotFound, code: CodeProjectNotFound, msg: "no such project: " + project, err: err}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, CreatedKey{Key: toAPIKey(rec), Secret: key})
}

func (s *server) ListKeys(w http.ResponseWriter, r *http.Request, params ListKeysParams) {
	ctx := r.Context()
	if s.tenancy == nil {
		s.writeError(w, r, errNoTenancy)
		return
	}
	project := caller(ctx).Project
	if params.Project != nil && *params.Project != "" {
		project = *params.Project
	}
	switch {
	case project != caller(ctx).Project && !isAdmin(ctx):
		s.writeError(w, r, forbidden("only an admin may list another project's keys"))
		return
	case project == allProjects:
		project = ""
	}
	ks, err := s.tenancy.ListAPIKeys(ctx, project)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := KeyList{Keys: make([]APIKey, 0, len(ks))}
	for _, k := range ks {
		// A member sees its own key only among its project's.
		if isAdmin(ctx) || k.ID == caller(ctx).ID {
			out.Keys = append(out.Keys, toAPIKey(k))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) RevokeKey(w http.ResponseWriter, r *http.Request, keyID string) {
	ctx := r.Context()
	if s.tenancy == nil {
		s.writeError(w, r, errNoTenancy)
		return
	}
	notFound := &apiError{status: http.StatusNotFound, code: CodeKeyNotFound, msg: "no such key: " + keyID}
	k, err := s.tenancy.GetAPIKey(ctx, keyID)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && !k.RevokedAt.IsZero():
		err = notFound
	case err != nil:
	case !isAdmin(ctx) && k.ID != caller(ctx).ID:
		// A member may revoke its own key; another's is not there.
		err = notFound
	default:
		err = s.tenancy.RevokeAPIKey(ctx, keyID, time.Now())
	}
	if errors.Is(err, store.ErrNotFound) {
		err = notFound
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) RotateKey(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	err := s.requireAdmin(ctx)
	if err == nil && s.rotate == nil {
		err = &apiError{status: http.StatusNotImplemented, code: CodeNotImplemented, msg: "this hostd has no bootstrap key to rotate"}
	}
	var key string
	if err == nil {
		key, err = s.rotate(ctx)
	}
	var rec store.APIKey
	if err == nil {
		rec, err = s.tenancy.GetAPIKey(ctx, auth.BootstrapID(key))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, CreatedKey{Key: toAPIKey(rec), Secret: key})
}

func toAPIKey(k store.APIKey) APIKey {
	out := APIKey{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Project: k.Project, Role: APIKeyRole(k.Role),
		CreatedAt: k.CreatedAt.UTC(), Bootstrap: k.Bootstrap}
	if !k.LastUsedAt.IsZero() {
		t := k.LastUsedAt.UTC()
		out.LastUsedAt = &t
	}
	if !k.ExpiresAt.IsZero() {
		t := k.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	return out
}
