package api

import (
	"bufio"
	"context"
	"strings"
	"unicode/utf8"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/mounts"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
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
	err := decodeJSON(w, r, maxJSONBody, &req, true)
	switch {
	case err != nil:
	case req.VCPUs < 0 || req.MemoryMiB < 0:
		err = badRequest(CodeInvalidRequest, "vcpus and memory_mib must not be negative")
	default:
		err = errors.Join(checkSeconds(req), checkEnv("env", req.Env), checkEnv("secret_env", req.SecretEnv), s.checkSecrets(r.Context(), req))
	}
	if err == nil {
		err = s.reachSources(r.Context(), req.Snapshot, req.Template)
	}
	var release func()
	if err == nil {
		release, err = s.admit(r.Context(), 1, req.VCPUs, req.MemoryMiB)
	}
	if release != nil {
		defer release()
	}
	var mainCmd []string
	var mainInGuest bool
	if err == nil && req.Start {
		mainCmd, mainInGuest, err = s.mainCommand(r.Context(), req.Template)
	}
	if err != nil {
		s.writeError(w, r, err)
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
		Boot:      bootOf(req.Boot),
		Limits:    limitsOf(req),
		Caller:    KeyName(r.Context()),
		Mounts:    toMounts(req.Mounts),
	})
	if err == nil {
		err = s.own(r.Context(), store.KindSandbox, info.ID, false)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := toSandbox(info)
	if mainInGuest {
		if mainCmd, err = s.guestMainCommand(r.Context(), info.ID, req.Template); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if mainCmd != nil {
		if out.MainExecID, err = s.startMain(r.Context(), info.ID, mainCmd); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	w.Header().Set("Location", "/v1/sandboxes/"+info.ID)
	writeJSON(w, http.StatusCreated, out)
}

func (s *server) ListSandboxes(w http.ResponseWriter, r *http.Request, params ListSandboxesParams) {
	shown, err := s.scope(r.Context(), store.KindSandbox, params.Project)
	var infos []sandbox.Info
	if err == nil {
		infos, err = s.m.List(r.Context())
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list := SandboxList{Sandboxes: make([]Sandbox, 0, len(infos))}
	for _, info := range infos {
		if shown(info.ID) {
			list.Sandboxes = append(list.Sandboxes, toSandbox(info))
		}
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
	// The owner stays: a deleted sandbox's events are still its project's.
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

		Durable:         info.Durable,
		DurableManifest: info.DurableManifest,
		DurableAt:       deadline(info.DurableAt),
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
	body := bufio.NewReader(http.MaxBytesReader(w, r.Body, max))
	if isNull(body) {
		// null is not an object; decoded, it would say "nothing asked".
		return badRequest(CodeBadBody, "the body is null, not a JSON object")
	}
	dec := json.NewDecoder(body)
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
			URL: m.URL, Ref: m.Ref, AllowSymlinks: m.AllowSymlinks})
	}
	return out
}

// isNull reports whether the JSON value that r starts with is null. It
// consumes only leading white space.
func isNull(r *bufio.Reader) bool {
	for {
		b, err := r.Peek(1)
		if err != nil {
			return false
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = r.ReadByte()
			continue
		}
		p, _ := r.Peek(4)
		return string(p) == "null"
	}
}

// checkSeconds refuses a create's durations out of their ranges.
func checkSeconds(req CreateSandboxRequest) error {
	_, lifetime := seconds("timeout_s", req.TimeoutS, maxLifetimeS)
	_, exec := seconds("exec_timeout_s", req.ExecTimeoutS, maxWaitS)
	_, idle := seconds("idle_timeout_s", req.IdleTimeoutS, maxWaitS)
	return errors.Join(lifetime, exec, idle)
}

// checkEnv refuses env names that the guest could not set: empty, or with
// '=' or NUL in them, and values with NUL.
func checkEnv(field string, env map[string]string) error {
	for k, v := range env {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return badRequest(CodeInvalidRequest, "%s: name %q is not an environment variable name (empty, or has '=' or NUL)", field, k)
		case strings.ContainsRune(v, 0):
			return badRequest(CodeInvalidRequest, "%s: the value of %s has a NUL byte", field, k)
		case !utf8.ValidString(k):
			return badRequest(CodeInvalidRequest, "%s: name %q is not UTF-8", field, k)
		}
	}
	return nil
}

// checkSecrets refuses a create whose secret_env or network inject rules
// name secrets that do not exist (without a secret store, the create
// fails later for want of a network anyway).
func (s *server) checkSecrets(ctx context.Context, req CreateSandboxRequest) error {
	var names []string
	for _, secret := range req.SecretEnv {
		names = append(names, secret)
	}
	if req.Network != nil {
		for _, r := range req.Network.Inject {
			names = append(names, egress.InjectRule{Value: r.Value}.Secrets()...)
		}
	}
	return s.secretsExist(ctx, names)
}

// secretsExist refuses names that are not stored secrets.
func (s *server) secretsExist(ctx context.Context, names []string) error {
	if len(names) == 0 || s.secrets == nil {
		return nil
	}
	have, err := s.secrets.List(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, m := range have {
		known[m.Name] = true
	}
	for _, n := range names {
		if !known[n] || s.reach(ctx, store.KindSecret, n, false) != nil {
			return &apiError{status: http.StatusBadRequest, code: CodeSecretNotFound, msg: fmt.Sprintf("secret %q does not exist (create it first: POST /v1/secrets)", n)}
		}
	}
	return nil
}

// bootOf maps the request's boot choice to the manager's.
func bootOf(b CreateSandboxRequestBoot) string {
	if b == CreateSandboxRequestBootCold {
		return sandbox.BootCold
	}
	return sandbox.BootAuto
}
