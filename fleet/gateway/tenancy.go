package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/store"
)

var projectName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// maxKeyLife bounds a key's expiry, as hostd's.
const maxKeyLife = 10 * 365 * 24 * time.Hour

// projects routes /v1/projects (admins only).
func (g *Gateway) projects(w http.ResponseWriter, r *http.Request, rest []string) string {
	if !isAdmin(r.Context()) {
		g.writeError(w, errorf(http.StatusForbidden, CodeForbidden, "projects are managed with an admin key"))
		return "projects"
	}
	dctx, cancel := g.dbctx(r.Context())
	defer cancel()
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		ps, err := g.st.ListProjects(dctx)
		if err != nil {
			g.writeError(w, err)
			return "projects"
		}
		out := apitypes.ProjectList{Projects: []apitypes.Project{}}
		for _, p := range ps {
			out.Projects = append(out.Projects, apitypes.Project{Name: p.Name, CreatedAt: p.Created})
		}
		writeJSON(w, http.StatusOK, out)
	case len(rest) == 0 && r.Method == http.MethodPost:
		var req apitypes.CreateProjectRequest
		if err := decode(r, &req); err != nil {
			g.writeError(w, err)
			return "projects"
		}
		if !projectName.MatchString(req.Name) {
			g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "project name %q: want [a-z0-9][a-z0-9_-]{0,62}", req.Name))
			return "projects"
		}
		p, err := g.st.CreateProject(dctx, store.Project{Name: req.Name})
		if errors.Is(err, store.ErrExists) {
			err = errorf(http.StatusConflict, CodeProjectExists, "project %s exists", req.Name)
		}
		if err != nil {
			g.writeError(w, err)
			return "projects"
		}
		writeJSON(w, http.StatusCreated, apitypes.Project{Name: p.Name, CreatedAt: p.Created})
	default:
		g.writeError(w, errorf(http.StatusMethodNotAllowed, CodeInvalid, "method %s not allowed", r.Method))
	}
	return "projects"
}

// keysAPI routes /v1/keys, /v1/keys/rotate and /v1/keys/{id}.
func (g *Gateway) keysAPI(w http.ResponseWriter, r *http.Request, rest []string) string {
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		g.listKeys(w, r)
	case len(rest) == 0 && r.Method == http.MethodPost:
		g.createKey(w, r)
	case len(rest) == 1 && rest[0] == "rotate" && r.Method == http.MethodPost:
		g.rotate(w, r)
	case len(rest) == 1 && r.Method == http.MethodDelete:
		g.revoke(w, r, rest[0])
	default:
		g.writeError(w, errorf(http.StatusMethodNotAllowed, CodeInvalid, "method %s not allowed", r.Method))
	}
	return "keys"
}

func keyJSON(k store.APIKey) apitypes.APIKey {
	return apitypes.APIKey{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Project: k.Project, Role: apitypes.APIKeyRole(k.Role),
		CreatedAt: k.Created, ExpiresAt: k.Expires, LastUsedAt: k.LastUsed, Bootstrap: k.Bootstrap}
}

func (g *Gateway) listKeys(w http.ResponseWriter, r *http.Request) {
	project := caller(r.Context()).Project
	if q := r.URL.Query().Get("project"); isAdmin(r.Context()) && q != "" {
		project = strings.ReplaceAll(q, "*", "")
	}
	dctx, cancel := g.dbctx(r.Context())
	defer cancel()
	ks, err := g.st.ListKeys(dctx, project)
	if err != nil {
		g.writeError(w, err)
		return
	}
	out := apitypes.KeyList{Keys: []apitypes.APIKey{}}
	for _, k := range ks {
		if k.Revoked == nil {
			out.Keys = append(out.Keys, keyJSON(k))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) createKey(w http.ResponseWriter, r *http.Request) {
	var req apitypes.CreateKeyRequest
	if err := decode(r, &req); err != nil {
		g.writeError(w, err)
		return
	}
	me := caller(r.Context())
	k := store.APIKey{Name: req.Name, Project: req.Project, Role: string(req.Role)}
	if k.Project == "" {
		k.Project = me.Project
	}
	if k.Role == "" {
		k.Role = store.RoleMember
	}
	if k.Name == "" {
		k.Name = "key"
	}
	switch {
	case k.Role != store.RoleMember && k.Role != store.RoleAdmin:
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "role %q: want member or admin", k.Role))
		return
	case me.Role != store.RoleAdmin && (k.Project != me.Project || k.Role != store.RoleMember):
		g.writeError(w, errorf(http.StatusForbidden, CodeForbidden, "a member key makes member keys of its own project only"))
		return
	case req.ExpiresInS < 0 || time.Duration(req.ExpiresInS)*time.Second > maxKeyLife || (req.ExpiresInS > 0 && req.ExpiresAt != nil):
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "expires_in_s: 0 to 315360000, and not with expires_at"))
		return
	}
	if req.ExpiresInS > 0 {
		t := time.Now().Add(time.Duration(req.ExpiresInS) * time.Second)
		k.Expires = &t
	} else if req.ExpiresAt != nil {
		k.Expires = req.ExpiresAt
	}
	secret, k, err := g.makeKey(r.Context(), k)
	if err != nil {
		g.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, apitypes.CreatedKey{Key: keyJSON(k), Secret: secret})
}

// makeKey stores a new key of k's name, project and role.
func (g *Gateway) makeKey(ctx context.Context, k store.APIKey) (string, store.APIKey, error) {
	dctx, cancel := g.dbctx(ctx)
	defer cancel()
	if _, err := g.st.GetProject(dctx, k.Project); isNotFound(err) {
		return "", k, errorf(http.StatusNotFound, CodeProjectNotFound, "project not found: %s", k.Project)
	} else if err != nil {
		return "", k, err
	}
	secret, id, prefix := newKey()
	k.ID, k.Prefix, k.Hash = id, prefix, hashKey(secret)
	k, err := g.st.CreateKey(dctx, k)
	return secret, k, err
}

func (g *Gateway) revoke(w http.ResponseWriter, r *http.Request, id string) {
	me := caller(r.Context())
	dctx, cancel := g.dbctx(r.Context())
	defer cancel()
	k, err := g.st.GetKey(dctx, id)
	if isNotFound(err) || err == nil && me.Role != store.RoleAdmin && k.ID != me.ID {
		g.writeError(w, errorf(http.StatusNotFound, CodeKeyNotFound, "key not found: %s", id))
		return
	}
	if err != nil {
		g.writeError(w, err)
		return
	}
	if _, err := g.st.RevokeKey(dctx, id); err != nil {
		g.writeError(w, err)
		return
	}
	g.keys.revoked(k.Hash) // this replica at once; the others by NOTIFY
	w.WriteHeader(http.StatusNoContent)
}

// rotate makes a new bootstrap admin key, writes it to the admin key
// file (when the gateway has one) and revokes the previous ones.
func (g *Gateway) rotate(w http.ResponseWriter, r *http.Request) {
	if !isAdmin(r.Context()) {
		g.writeError(w, errorf(http.StatusForbidden, CodeForbidden, "rotating the bootstrap key takes an admin key"))
		return
	}
	secret, k, err := g.bootstrapKey(r.Context(), true)
	if err != nil {
		g.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, apitypes.CreatedKey{Key: keyJSON(k), Secret: secret})
}

// bootstrapKey makes a bootstrap admin key of the default project; with
// revokeOld, the previous bootstrap keys are revoked once it is written.
func (g *Gateway) bootstrapKey(ctx context.Context, revokeOld bool) (string, store.APIKey, error) {
	secret, k, err := g.makeKey(ctx, store.APIKey{Name: "bootstrap", Project: store.DefaultProject, Role: store.RoleAdmin, Bootstrap: true})
	if err != nil {
		return "", k, err
	}
	if f := g.cfg.AdminKeyFile; f != "" {
		if err := writeKeyFile(f, secret); err != nil {
			return "", k, err
		}
	}
	if !revokeOld {
		return secret, k, nil
	}
	dctx, cancel := g.dbctx(ctx)
	defer cancel()
	ks, err := g.st.ListKeys(dctx, store.DefaultProject)
	if err != nil {
		return "", k, err
	}
	for _, old := range ks {
		if old.Bootstrap && old.ID != k.ID && old.Revoked == nil {
			if _, err := g.st.RevokeKey(dctx, old.ID); err != nil {
				return "", k, err
			}
			g.keys.revoked(old.Hash)
		}
	}
	return secret, k, nil
}

func writeKeyFile(path, secret string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("gateway: admin key file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("gateway: admin key file: %w", err)
	}
	return nil
}

// Bootstrap makes sure an admin can get in: envKey (AGENTBOX_API_KEY), if
// set, is stored as a bootstrap admin key; else, when the fleet has no key
// at all, a new one is made and written to the admin key file.
func (g *Gateway) Bootstrap(ctx context.Context, envKey string) error {
	if envKey != "" {
		rest := strings.TrimPrefix(envKey, "ab_")
		k := store.APIKey{Name: "env", Project: store.DefaultProject, Role: store.RoleAdmin, Bootstrap: true, Hash: hashKey(envKey),
			Prefix: rest[:min(8, len(rest))]}
		k.ID = "key_env_" + k.Hash[:12]
		dctx, cancel := g.dbctx(ctx)
		defer cancel()
		if _, err := g.st.CreateKey(dctx, k); err != nil && !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("gateway: bootstrap key: %w", err)
		}
		return nil
	}
	dctx, cancel := g.dbctx(ctx)
	ks, err := g.st.ListKeys(dctx, "")
	cancel()
	if err != nil {
		return fmt.Errorf("gateway: bootstrap key: %w", err)
	}
	var inFile string
	if b, err := os.ReadFile(g.cfg.AdminKeyFile); g.cfg.AdminKeyFile != "" && err == nil {
		inFile = hashKey(strings.TrimSpace(string(b)))
	}
	for _, k := range ks {
		if k.Role == store.RoleAdmin && k.Usable(time.Now()) && (g.cfg.AdminKeyFile == "" || k.Hash == inFile) {
			return nil
		}
	}
	if g.cfg.AdminKeyFile == "" {
		return errors.New("gateway: the fleet has no admin key: set AGENTBOX_API_KEY or --admin-key-file")
	}
	if _, _, err := g.bootstrapKey(ctx, false); err != nil {
		return fmt.Errorf("gateway: bootstrap key: %w", err)
	}
	g.log.Info("made the fleet's admin key", "file", g.cfg.AdminKeyFile)
	return nil
}
