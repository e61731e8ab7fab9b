package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/hostd/mounts"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// maxJSONBody bounds the JSON bodies other than exec's.
const maxJSONBody = 1 << 20

func (s *server) GetHealth(w http.ResponseWriter, r *http.Request) {
	var h HealthInfo
	if s.health != nil {
		h = s.health()
	}
	writeJSON(w, http.StatusOK, Health{Status: "ok", VMM: h.VMM, Accel: h.Accel})
}

func (s *server) GetOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openapiYAML)
}

func (s *server) CreateSandbox(w http.ResponseWriter, r *http.Request) {
	var req CreateSandboxRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.VCPUs < 0 || req.MemoryMiB < 0 || req.TimeoutS < 0 {
		s.writeError(w, r, badRequest(CodeInvalidRequest, "vcpus, memory_mib and timeout_s must not be negative"))
		return
	}
	info, err := s.m.Create(r.Context(), sandbox.CreateOptions{
		VCPUs:     req.VCPUs,
		MemoryMiB: req.MemoryMiB,
		Env:       req.Env,
		TimeoutS:  req.TimeoutS,
		Metadata:  req.Metadata,
		Network:   toPolicy(req.Network),
		SecretEnv: req.SecretEnv,
		Snapshot:  req.Snapshot,
		Template:  req.Template,
		Limits:    limitsOf(req),
		Caller:    KeyName(r.Context()),
		Mounts:    toMounts(req.Mounts),
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/sandboxes/"+info.ID)
	writeJSON(w, http.StatusCreated, toSandbox(info))
}

func (s *server) ListSandboxes(w http.ResponseWriter, r *http.Request) {
	infos, err := s.m.List(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list := SandboxList{Sandboxes: make([]Sandbox, 0, len(infos))}
	for _, info := range infos {
		list.Sandboxes = append(list.Sandboxes, toSandbox(info))
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) GetSandbox(w http.ResponseWriter, r *http.Request, id SandboxID) {
	info, err := s.m.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toSandbox(info))
}

func (s *server) DeleteSandbox(w http.ResponseWriter, r *http.Request, id SandboxID) {
	if err := s.m.Delete(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.forgetPorts(r, id)
	w.WriteHeader(http.StatusNoContent)
}

func toSandbox(info sandbox.Info) Sandbox {
	return Sandbox{
		ID:         info.ID,
		State:      SandboxState(info.State),
		VCPUs:      info.VCPUs,
		MemoryMiB:  info.MemoryMiB,
		Env:        nonNil(info.Env),
		TimeoutS:   info.TimeoutS,
		Metadata:   nonNil(info.Metadata),
		CreatedAt:  info.CreatedAt.UTC(),
		Error:      info.Error,
		VMPID:      info.VMPID,
		SnapshotID: info.SnapshotID,
		Limits:     toLimits(info.Limits),
		Deadline:   deadline(info.Deadline),
	}
}

// nonNil makes an absent map encode as {} rather than null.
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// decodeJSON reads one JSON value of at most max bytes from r's body into v,
// refusing unknown fields and trailing data. An empty body leaves v alone
// when allowEmpty is set.
func decodeJSON(w http.ResponseWriter, r *http.Request, max int64, v any, allowEmpty bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	switch {
	case errors.Is(err, io.EOF) && allowEmpty:
		return nil
	case errors.Is(err, io.EOF):
		return badRequest(CodeBadBody, "empty body")
	case err != nil:
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: http.StatusRequestEntityTooLarge, code: CodeBadBody, msg: "body too large", err: err}
		}
		return &apiError{status: http.StatusBadRequest, code: CodeBadBody, msg: "bad JSON body", err: err}
	}
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		return badRequest(CodeBadBody, "trailing data after the JSON body")
	}
	return nil
}

// toMounts converts the request's mounts.
func toMounts(in []Mount) []mounts.Spec {
	out := make([]mounts.Spec, 0, len(in))
	for _, m := range in {
		src := m.Source
		if m.Type == MountTypeGit && src != "" {
			src = "(given)" // hostd sets a git mount's source; a given one is refused
		}
		out = append(out, mounts.Spec{Type: string(m.Type), Source: src, Path: m.Path, ReadOnly: m.ReadOnly,
			Endpoint: m.Endpoint, Bucket: m.Bucket, Prefix: m.Prefix, Region: m.Region, Secret: m.Secret,
			URL: m.URL, Ref: m.Ref})
	}
	return out
}
