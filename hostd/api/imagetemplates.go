package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/hostd/imagetemplate"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/images/imageconfig"
	"github.com/agentbox/agentbox/images/oci"
)

// ImageTemplates builds templates from OCI images
// (*imagetemplate.Builder); nil answers image builds with 501.
type ImageTemplates interface {
	Build(ctx context.Context, req imagetemplate.Request, progress func(oci.Progress)) (imagetemplate.Result, error)
	Image(ctx context.Context, name string) (store.TemplateImage, imageconfig.Config, error)
	// KernelOf is the own kernel of a template's snapshot (nil: hostd's).
	KernelOf(ctx context.Context, snapshotID string) (*imagetemplate.Kernel, error)
}

// progressEvery bounds how often pull progress is streamed.
const progressEvery = 250 * time.Millisecond

// buildTemplate streams an image build as NDJSON TemplateBuildEvents.
func (s *server) buildTemplate(w http.ResponseWriter, r *http.Request, req CreateTemplateRequest) {
	if s.images == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotImplemented, code: CodeInvalidRequest, msg: "this hostd builds no templates from images"})
		return
	}
	if req.SnapshotID != "" {
		s.writeError(w, r, badRequest(CodeInvalidRequest, "give snapshot_id or image, not both"))
		return
	}
	// The stream starts with the first event: a build that fails before
	// one (a registry that refuses the credentials, a path that is no
	// image) answers with its own status; one that fails later says it in
	// its error event's status.
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	started := false
	send := func(ev TemplateBuildEvent) {
		if !started {
			started = true
			startNDJSON(w, rc) // no write deadline: a pull may take long
		}
		_ = enc.Encode(ev) // a client gone away ends the build through r's context
		_ = rc.Flush()
	}
	var last time.Time
	progress := func(p oci.Progress) {
		if p.Phase == oci.PhasePull && time.Since(last) < progressEvery && p.Current < p.Total {
			return
		}
		last = time.Now()
		phase, cur, total := p.Phase, p.Current, p.Total
		send(TemplateBuildEvent{Type: TemplateBuildEventTypeProgress, Phase: &phase, Current: &cur, Total: &total})
	}
	im := req.Image
	res, err := s.images.Build(r.Context(), imagetemplate.Request{Name: req.Name, Ref: im.Ref, Insecure: im.Insecure,
		RegistrySecret: im.RegistrySecret, FreeMiB: int64(im.FreeMiB), MemoryMiB: im.MemoryMiB, PoolSize: req.PoolSize,
		Kernel: im.Kernel, Modules: im.Modules}, progress)
	if err != nil {
		status, _ := errorFor(err)
		if status >= 500 {
			s.log.Error("template build failed", "template", req.Name, "err", err)
		}
		if !started {
			s.writeError(w, r, err)
			return
		}
		body := errorBody(err)
		send(TemplateBuildEvent{Type: TemplateBuildEventTypeError, Error: &body, Status: &status})
		return
	}
	t := toTemplate(res.Template)
	t.Image = toTemplateImage(res.Image, res.Config)
	t.Kernel = toTemplateKernel(res.Kernel)
	send(TemplateBuildEvent{Type: TemplateBuildEventTypeDone, Template: &t})
}

func toTemplateImage(ti store.TemplateImage, c imageconfig.Config) *TemplateImage {
	out := &TemplateImage{Ref: ti.Ref, Digest: ti.Digest, WorkingDir: &c.WorkingDir, User: &c.User}
	if c.Env != nil {
		out.Env = &c.Env
	}
	if c.Entrypoint != nil {
		out.Entrypoint = &c.Entrypoint
	}
	if c.Cmd != nil {
		out.Cmd = &c.Cmd
	}
	if c.ExposedPorts != nil {
		out.ExposedPorts = &c.ExposedPorts
	}
	return out
}

// withImage adds the image a template was built from, if any, and its
// kernel.
func (s *server) withImage(ctx context.Context, t Template) Template {
	t.Kernel = toTemplateKernel(nil)
	if s.images == nil {
		return t
	}
	if ti, cfg, err := s.images.Image(ctx, t.Name); err == nil {
		t.Image = toTemplateImage(ti, cfg)
	}
	k, err := s.images.KernelOf(ctx, t.SnapshotID)
	if err != nil {
		s.log.Warn("template kernel", "template", t.Name, "err", err)
	}
	t.Kernel = toTemplateKernel(k)
	return t
}

func toTemplateKernel(k *imagetemplate.Kernel) *TemplateKernel {
	if k == nil {
		return &TemplateKernel{Source: TemplateKernelSourceDefault}
	}
	return &TemplateKernel{Source: TemplateKernelSourceTemplate, Path: k.Path, Digest: k.Digest, ModulesDir: k.ModulesDir, Modules: k.Modules}
}
