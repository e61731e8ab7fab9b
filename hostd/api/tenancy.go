package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/secrets"
	"github.com/agentbox/agentbox/hostd/store"
)

// Tenancy holds projects, keys and the owner of each sandbox, snapshot,
// template and secret (*store.Store implements it). With a nil Tenancy,
// hostd has one project and every key is its admin.
type Tenancy interface {
	GetOwner(ctx context.Context, kind, id string) (store.Owner, error)
	SetOwner(ctx context.Context, kind, id string, o store.Owner) error
	DeleteOwner(ctx context.Context, kind, id string) error
	Owners(ctx context.Context, kind string) (map[string]store.Owner, error)

	CreateProject(ctx context.Context, name string) (store.Project, error)
	GetProject(ctx context.Context, name string) (store.Project, error)
	ListProjects(ctx context.Context) ([]store.Project, error)

	CreateAPIKey(ctx context.Context, k store.APIKey, hash string) error
	GetAPIKey(ctx context.Context, id string) (store.APIKey, error)
	ListAPIKeys(ctx context.Context, project string) ([]store.APIKey, error)
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error
}

var _ Tenancy = (*store.Store)(nil)

// Codes of tenancy.
const (
	CodeForbidden       = "forbidden"
	CodeQuotaExceeded   = "quota_exceeded"
	CodeNameTaken       = "name_taken"
	CodeKeyNotFound     = "key_not_found"
	CodeProjectNotFound = "project_not_found"
	CodeProjectExists   = "project_exists"
)

// keyRecheck is how often a request that is still open (an exec stream, a
// WebSocket, a long download) checks that its key is still valid.
const keyRecheck = 2 * time.Second

// allProjects is the ?project= of an admin's list of every project.
const allProjects = "*"

func forbidden(format string, args ...any) error {
	return &apiError{status: http.StatusForbidden, code: CodeForbidden, msg: fmt.Sprintf(format, args...)}
}

// hidden is what a resource of another project answers: the very error of
// one that does not exist.
func hidden(kind, id string) error {
	switch kind {
	case store.KindSandbox:
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
	case store.KindSnapshot:
		return fmt.Errorf("%w: %s", sandbox.ErrSnapshotNotFound, id)
	case store.KindTemplate:
		return fmt.Errorf("%w: template %s", sandbox.ErrNotFound, id)
	case store.KindSecret:
		return secretError(fmt.Errorf("%w: %s", secrets.ErrNotFound, id))
	}
	return &apiError{status: http.StatusNotFound, code: CodeNotFound, msg: "not found"}
}

func isAdmin(ctx context.Context) bool { return caller(ctx).Role == store.RoleAdmin }

// reach returns nil if the caller may use the resource kind/id (write: change
// or delete it), or the error of a resource that does not exist when it
// belongs to another project. Admins reach every project's resources, and
// alone those with no owner (hostd's own). Templates that an admin shared
// are readable by every project and changed by admins only.
func (s *server) reach(ctx context.Context, kind, id string, write bool) error {
	if s.tenancy == nil || isAdmin(ctx) {
		return nil
	}
	o, err := s.tenancy.GetOwner(ctx, kind, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// No owner: hostd's own, or made before its owner was written.
		o = store.Owner{}
	case err != nil:
		return err
	}
	switch {
	case o.Project == caller(ctx).Project && o.Project != "" && !(write && o.Shared):
		return nil
	case o.Shared && kind == store.KindTemplate && !write:
		return nil
	case o.Shared && kind == store.KindTemplate:
		return forbidden("template %s is shared: only an admin may change it", id)
	}
	return hidden(kind, id)
}

// guard is every operation's middleware: it refuses a path that names
// another project's resource, and ends a request that is still open once
// its key is revoked or expires.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.checkRoute(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		ctx, stop := s.watchKey(r.Context())
		defer stop()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// checkRoute checks the resource a route's path names.
func (s *server) checkRoute(r *http.Request) error {
	_, path, _ := strings.Cut(r.Pattern, " ")
	ctx := r.Context()
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	switch {
	case strings.HasPrefix(path, "/v1/sandboxes/{id}"):
		return s.reach(ctx, store.KindSandbox, r.PathValue("id"), write)
	case strings.HasPrefix(path, "/v1/snapshots/{snapshot_id}"):
		return s.reach(ctx, store.KindSnapshot, r.PathValue("snapshot_id"), write)
	case path == "/v1/templates/{name}":
		return s.reach(ctx, store.KindTemplate, r.PathValue("name"), write)
	case path == "/v1/secrets/{name}":
		return s.reach(ctx, store.KindSecret, r.PathValue("name"), write)
	case path == "/metrics", strings.HasPrefix(path, "/v1/projects"):
		if s.tenancy != nil && !isAdmin(ctx) {
			return forbidden("%s is for admins", path)
		}
	}
	return nil
}

// watchKey returns ctx, cancelled once the key of its request is revoked
// or expires (checked every keyRecheck while the request runs).
func (s *server) watchKey(ctx context.Context) (context.Context, func()) {
	id := caller(ctx).ID
	if s.keys == nil || id == "" {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(keyRecheck)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.keys.Check(context.WithoutCancel(ctx), id); err != nil && errors.Is(err, auth.ErrUnauthorized) {
					s.log.Info("request ended: its key is no longer valid", "key_id", id)
					cancel(err)
					return
				}
			}
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

// own records that the caller's project owns kind/id.
func (s *server) own(ctx context.Context, kind, id string, shared bool) error {
	if s.tenancy == nil {
		return nil
	}
	return s.tenancy.SetOwner(ctx, kind, id, store.Owner{Project: caller(ctx).Project, Shared: shared})
}

// disown forgets the owner of a deleted resource; a failure is logged (the
// row only keeps a name from being taken).
func (s *server) disown(ctx context.Context, kind, id string) {
	if s.tenancy == nil {
		return
	}
	if err := s.tenancy.DeleteOwner(context.WithoutCancel(ctx), kind, id); err != nil {
		s.log.Warn("forget owner", "kind", kind, "id", id, "err", err)
	}
}

// claim takes a template or secret name for the caller's project before it
// is made: names are one namespace per host, so one another project holds
// is refused with name_taken (their contents stay unreachable).
func (s *server) claim(ctx context.Context, kind, name string, shared bool) error {
	if s.tenancy == nil {
		return nil
	}
	if shared && !isAdmin(ctx) {
		return forbidden("only an admin may share a %s", kind)
	}
	taken := &apiError{status: http.StatusConflict, code: CodeNameTaken, msg: fmt.Sprintf("%s name %q is taken", kind, name)}
	o, err := s.tenancy.GetOwner(ctx, kind, name)
	switch {
	case errors.Is(err, store.ErrNotFound) && !isAdmin(ctx) && s.exists(ctx, kind, name):
		// hostd's own, with no owner: only an admin replaces it.
		return taken
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err
	case o.Project != caller(ctx).Project && !isAdmin(ctx):
		return taken
	case o.Shared && !isAdmin(ctx):
		return forbidden("%s %s is shared: only an admin may change it", kind, name)
	}
	return s.own(ctx, kind, name, shared)
}

// exists reports whether a template or secret of name is stored.
func (s *server) exists(ctx context.Context, kind, name string) bool {
	switch kind {
	case store.KindTemplate:
		_, err := s.m.GetTemplate(ctx, name)
		return err == nil
	case store.KindSecret:
		if s.secrets == nil {
			return false
		}
		list, err := s.secrets.List(ctx)
		for _, m := range list {
			if m.Name == name {
				return true
			}
		}
		return err != nil // unsure: taken
	}
	return false
}

// scope returns which resources of kind a list shows: the caller's
// project's, or (admins) the project of ?project=, or every one's ("*").
// Shared templates are listed to every project.
func (s *server) scope(ctx context.Context, kind string, project *string) (func(id string) bool, error) {
	if s.tenancy == nil {
		return func(string) bool { return true }, nil
	}
	want := caller(ctx).Project
	if project != nil && *project != "" && *project != want {
		if !isAdmin(ctx) {
			return nil, forbidden("only an admin may list another project")
		}
		want = *project
	}
	owners, err := s.tenancy.Owners(ctx, kind)
	if err != nil {
		return nil, err
	}
	return func(id string) bool {
		o, ok := owners[id]
		switch {
		case want == allProjects:
			return true
		case !ok:
			return false
		}
		return o.Project == want || (kind == store.KindTemplate && o.Shared)
	}, nil
}

// reachSources checks the snapshot and template a create starts from.
func (s *server) reachSources(ctx context.Context, snapshotID, template string) error {
	if snapshotID != "" {
		if err := s.reach(ctx, store.KindSnapshot, snapshotID, false); err != nil {
			return err
		}
	}
	if template != "" {
		return s.reach(ctx, store.KindTemplate, template, false)
	}
	return nil
}

// admitLike admits n sandboxes shaped as sandbox id (a fork's children, or
// n = 0: its resume).
func (s *server) admitLike(ctx context.Context, id string, n int) (func(), error) {
	if _, ok := s.quotas.byProject[caller(ctx).Project]; !ok {
		return func() {}, nil
	}
	info, err := s.m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.admit(ctx, n, info.VCPUs, info.MemoryMiB)
}

// claimTemplate checks what a template create names and claims its name.
func (s *server) claimTemplate(ctx context.Context, req CreateTemplateRequest) error {
	if req.SnapshotID != "" {
		if err := s.reach(ctx, store.KindSnapshot, req.SnapshotID, false); err != nil {
			return err
		}
	}
	if req.Image != nil && req.Image.RegistrySecret != "" {
		if err := s.reach(ctx, store.KindSecret, req.Image.RegistrySecret, false); err != nil {
			return err
		}
	}
	return s.claim(ctx, store.KindTemplate, req.Name, req.Shared)
}

// unclaimTemplate gives a claimed name back when no template was made.
func (s *server) unclaimTemplate(ctx context.Context, name string) {
	if s.tenancy == nil {
		return
	}
	if _, err := s.m.GetTemplate(context.WithoutCancel(ctx), name); err != nil {
		s.disown(ctx, store.KindTemplate, name)
	}
}
