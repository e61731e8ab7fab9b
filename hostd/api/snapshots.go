package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
)

// SnapshotManager is what the snapshot, fork, pause and template handlers
// need of the sandbox manager.
type SnapshotManager interface {
	Snapshot(ctx context.Context, id string, opts sandbox.SnapshotOptions) (sandbox.SnapshotInfo, error)
	Fork(ctx context.Context, id string, opts sandbox.ForkOptions) ([]sandbox.Info, error)
	Pause(ctx context.Context, id string) (sandbox.Info, error)
	Resume(ctx context.Context, id string) (sandbox.Info, error)
	// ReleaseSandbox forgets a paused sandbox that is durable in the snapshot
	// store (it moved to another host) without touching the store.
	ReleaseSandbox(ctx context.Context, id string) error
	GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error)
	ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error)
	DeleteSnapshot(ctx context.Context, id string) error
	CreateTemplate(ctx context.Context, name, snapshotID string, poolSize int) (sandbox.TemplateInfo, error)
	GetTemplate(ctx context.Context, name string) (sandbox.TemplateInfo, error)
	ListTemplates(ctx context.Context) ([]sandbox.TemplateInfo, error)
	DeleteTemplate(ctx context.Context, name string) error
}

func (s *server) SnapshotSandbox(w http.ResponseWriter, r *http.Request, id SandboxID) {
	var req SnapshotRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.admitSnapshot(r.Context()); err != nil {
		s.writeError(w, r, err)
		return
	}
	sn, err := s.m.Snapshot(r.Context(), id, sandbox.SnapshotOptions{StayPaused: req.StayPaused, Kind: string(req.Kind), CacheKey: req.CacheKey, Env: req.Env, Cwd: req.Cwd, User: req.User})
	if err == nil {
		err = s.own(r.Context(), store.KindSnapshot, sn.ID, false)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toSnapshot(sn))
}

func (s *server) ForkSandbox(w http.ResponseWriter, r *http.Request, id SandboxID) {
	var req ForkRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	release, err := s.admitLike(r.Context(), id, max(req.Count, 1))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	forks, err := s.m.Fork(r.Context(), id, sandbox.ForkOptions{Count: req.Count, Caller: KeyName(r.Context())})
	for _, f := range forks {
		err = errors.Join(err, s.own(r.Context(), store.KindSandbox, f.ID, false))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list := SandboxList{Sandboxes: make([]Sandbox, 0, len(forks))}
	for _, f := range forks {
		list.Sandboxes = append(list.Sandboxes, toSandbox(f))
	}
	writeJSON(w, http.StatusCreated, list)
}

func (s *server) PauseSandbox(w http.ResponseWriter, r *http.Request, id SandboxID) {
	s.sandboxResult(w, r)(s.m.Pause(r.Context(), id))
}

func (s *server) ResumeSandbox(w http.ResponseWriter, r *http.Request, id SandboxID) {
	release, err := s.admitLike(r.Context(), id, 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	s.sandboxResult(w, r)(s.m.Resume(r.Context(), id))
}

// ReleaseSandbox is for the fleet (host token) or an admin: the gateway
// calls it on a migrated sandbox's old host.
func (s *server) ReleaseSandbox(w http.ResponseWriter, r *http.Request, id SandboxID) {
	// Without tenancy the one key (or the fleet's host token) is the
	// operator's; with it, only an admin may.
	if s.tenancy != nil && !isAdmin(r.Context()) {
		s.writeError(w, r, forbidden("only an admin key or the fleet may release a sandbox"))
		return
	}
	if err := s.m.ReleaseSandbox(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Its service records went with it (the store has them).
	s.forgetPorts(r, id)
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) sandboxResult(w http.ResponseWriter, r *http.Request) func(sandbox.Info, error) {
	return func(info sandbox.Info, err error) {
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, toSandbox(info))
	}
}

func (s *server) ListSnapshots(w http.ResponseWriter, r *http.Request, params ListSnapshotsParams) {
	shown, err := s.scope(r.Context(), store.KindSnapshot, params.Project)
	var sns []sandbox.SnapshotInfo
	if err == nil {
		sns, err = s.m.ListSnapshots(r.Context())
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list := SnapshotList{Snapshots: make([]Snapshot, 0, len(sns))}
	for _, sn := range sns {
		if shown(sn.ID) {
			list.Snapshots = append(list.Snapshots, toSnapshot(sn))
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) GetSnapshot(w http.ResponseWriter, r *http.Request, snapshotID string) {
	sn, err := s.m.GetSnapshot(r.Context(), snapshotID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toSnapshot(sn))
}

func (s *server) DeleteSnapshot(w http.ResponseWriter, r *http.Request, snapshotID string) {
	if err := s.m.DeleteSnapshot(r.Context(), snapshotID); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.disown(r.Context(), store.KindSnapshot, snapshotID)
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) CreateTemplate(w http.ResponseWriter, r *http.Request) {
	var req CreateTemplateRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.claimTemplate(r.Context(), req); err != nil {
		s.writeError(w, r, err)
		return
	}
	defer s.unclaimTemplate(r.Context(), req.Name)
	if req.Image != nil {
		s.buildTemplate(w, r, req)
		return
	}
	if req.SnapshotID == "" {
		s.writeError(w, r, badRequest(CodeInvalidRequest, "snapshot_id or image is required"))
		return
	}
	t, err := s.m.CreateTemplate(r.Context(), req.Name, req.SnapshotID, req.PoolSize)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.withImage(r.Context(), toTemplate(t)))
}

func (s *server) ListTemplates(w http.ResponseWriter, r *http.Request, params ListTemplatesParams) {
	shown, err := s.scope(r.Context(), store.KindTemplate, params.Project)
	var ts []sandbox.TemplateInfo
	if err == nil {
		ts, err = s.m.ListTemplates(r.Context())
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list := TemplateList{Templates: make([]Template, 0, len(ts))}
	for _, t := range ts {
		if shown(t.Name) {
			list.Templates = append(list.Templates, s.withImage(r.Context(), toTemplate(t)))
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) GetTemplate(w http.ResponseWriter, r *http.Request, name string) {
	t, err := s.m.GetTemplate(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withImage(r.Context(), toTemplate(t)))
}

func (s *server) DeleteTemplate(w http.ResponseWriter, r *http.Request, name string) {
	if err := s.m.DeleteTemplate(r.Context(), name); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.disown(r.Context(), store.KindTemplate, name)
	w.WriteHeader(http.StatusNoContent)
}

func toSnapshot(sn sandbox.SnapshotInfo) Snapshot {
	used := sn.UsedBy
	if used == nil {
		used = []string{}
	}
	return Snapshot{ID: sn.ID, Kind: sn.Kind, SandboxID: sn.SandboxID, ParentID: sn.ParentID, VCPUs: sn.VCPUs,
		MemoryMiB: sn.MemoryMiB, SizeBytes: sn.SizeBytes, CacheKey: sn.CacheKey, CreatedAt: sn.CreatedAt.UTC(), UsedBy: used}
}

func toTemplate(t sandbox.TemplateInfo) Template {
	return Template{Name: t.Name, SnapshotID: t.SnapshotID, PoolSize: t.PoolSize, PoolReady: t.PoolReady, CreatedAt: t.CreatedAt.UTC()}
}

// MigrateSandbox is the control plane's: a host alone has nowhere to move
// a sandbox to, so it answers 404 naming who serves it.
func (s *server) MigrateSandbox(w http.ResponseWriter, r *http.Request, id SandboxID) {
	s.writeError(w, r, &apiError{status: http.StatusNotFound, code: CodeNotFound,
		msg: "migrate is served by a fleet's control plane (agentbox gateway), not by a single host"})
}
