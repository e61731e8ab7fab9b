// Package imagetemplate builds templates from OCI images: it makes the
// image's read-only base (images/oci, cached by digest), boots a sandbox
// on it once with the image's env and working directory, snapshots it,
// names the snapshot a template (which gets a warm pool like any other)
// and records the image and its config. A failed build leaves no template,
// no image record and no build sandbox.
package imagetemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/images/imageconfig"
	"github.com/agentbox/agentbox/images/oci"
	"github.com/agentbox/agentbox/snapshot"
)

// Phases reported besides images/oci's.
const (
	PhaseBoot     = "boot"
	PhaseSnapshot = "snapshot"
)

// Sandboxes is what a build needs of hostd's sandbox service.
type Sandboxes interface {
	Create(ctx context.Context, opts sandbox.CreateOptions) (sandbox.Info, error)
	Delete(ctx context.Context, id string) error
	Snapshot(ctx context.Context, id string, opts sandbox.SnapshotOptions) (sandbox.SnapshotInfo, error)
	CreateTemplate(ctx context.Context, name, snapshotID string, poolSize int) (sandbox.TemplateInfo, error)
	DeleteTemplate(ctx context.Context, name string) error
}

// Store records template images (hostd/store implements it).
type Store interface {
	PutTemplateImage(ctx context.Context, ti store.TemplateImage) error
	GetTemplateImage(ctx context.Context, name string) (store.TemplateImage, error)
	TemplateImageOfSnapshot(ctx context.Context, snapshotID string) (store.TemplateImage, error)
}

// Secrets gives registry credentials by secret name (hostd/secrets).
type Secrets interface {
	SecretValue(ctx context.Context, name string) ([]byte, error)
}

// Builder builds templates from images.
type Builder struct {
	Sandboxes Sandboxes
	Store     Store
	Secrets   Secrets // nil: requests naming a secret fail
	Bases     *oci.Builder
	// Source holds hostd's insecure registries, local import roots and
	// Docker config keychain; a request adds to it.
	Source oci.SourceOptions
	Log    *slog.Logger
	// Initramfs is hostd's initramfs, which a template's own modules
	// directory is appended to; KernelDir is where those initramfs are
	// written for the build's boot.
	Initramfs, KernelDir string
}

// Request is one build.
type Request struct {
	Name           string
	Ref            string
	Insecure       bool
	RegistrySecret string
	FreeMiB        int64
	MemoryMiB      int
	PoolSize       int
	// Kernel, if set, is the template's own kernel (a path under an import
	// directory) and Modules its modules directory (see kernel.go).
	Kernel, Modules string
}

// Result is a built template and its image.
type Result struct {
	Template sandbox.TemplateInfo
	Image    store.TemplateImage
	Config   imageconfig.Config
	Kernel   *Kernel // nil: hostd's
}

// record is what a template image record's config holds: the image's
// config and the template's own kernel, if any.
type record struct {
	imageconfig.Config
	Kernel *Kernel `json:"kernel,omitempty"`
}

// ErrInvalid marks a bad request (no name, a secret that is not user:password).
var ErrInvalid = sandbox.ErrInvalid

// Build builds template req.Name from req.Ref, calling progress (if set)
// as it goes.
func (b *Builder) Build(ctx context.Context, req Request, progress func(oci.Progress)) (Result, error) {
	if progress == nil {
		progress = func(oci.Progress) {}
	}
	if req.Name == "" || req.Ref == "" {
		return Result{}, fmt.Errorf("%w: a template name and an image reference are required", ErrInvalid)
	}
	boot, err := b.kernelFor(req)
	if err != nil {
		return Result{}, err
	}
	defer boot.cleanup()
	src, err := b.sourceFor(ctx, req)
	if err != nil {
		return Result{}, err
	}
	src.Progress = progress
	img, err := oci.Open(ctx, req.Ref, src)
	if err != nil {
		return Result{}, err
	}
	base, err := b.Bases.Build(ctx, img, oci.BuildOptions{FreeMiB: req.FreeMiB, Progress: progress})
	if err != nil {
		return Result{}, err
	}
	progress(oci.Progress{Phase: PhaseBoot})
	sb, err := b.Sandboxes.Create(ctx, sandbox.CreateOptions{BaseImage: base.Path, MemoryMiB: req.MemoryMiB,
		Kernel: boot.kernel, Initramfs: boot.initramfs,
		Metadata: map[string]string{"agentbox.template-build": req.Name}})
	if err != nil {
		return Result{}, fmt.Errorf("boot %s: %w", req.Ref, err)
	}
	defer func() {
		if err := b.Sandboxes.Delete(context.WithoutCancel(ctx), sb.ID); err != nil {
			b.Log.Warn("delete build sandbox", "sandbox_id", sb.ID, "err", err)
		}
	}()
	progress(oci.Progress{Phase: PhaseSnapshot})
	sn, err := b.Sandboxes.Snapshot(ctx, sb.ID, sandbox.SnapshotOptions{Kind: snapshot.KindStep, CacheKey: "image:" + base.Digest,
		Env: base.Config.Env, Cwd: base.Config.WorkingDir, User: base.Config.User})
	if err != nil {
		return Result{}, fmt.Errorf("snapshot: %w", err)
	}
	t, err := b.Sandboxes.CreateTemplate(ctx, req.Name, sn.ID, req.PoolSize)
	if err != nil {
		return Result{}, err
	}
	cfg, _ := json.Marshal(record{Config: base.Config, Kernel: boot.info})
	ti := store.TemplateImage{Name: req.Name, SnapshotID: sn.ID, Ref: req.Ref, Digest: base.Digest, Base: base.Path, Config: cfg}
	if err := b.Store.PutTemplateImage(ctx, ti); err != nil {
		return Result{}, errors.Join(err, b.Sandboxes.DeleteTemplate(context.WithoutCancel(ctx), req.Name))
	}
	return Result{Template: t, Image: ti, Config: base.Config, Kernel: boot.info}, nil
}

// sourceFor adds the request's registry choices to hostd's.
func (b *Builder) sourceFor(ctx context.Context, req Request) (oci.SourceOptions, error) {
	src := b.Source
	src.Insecure = append([]string(nil), src.Insecure...)
	if req.Insecure || req.RegistrySecret != "" {
		host, err := registryOf(req.Ref)
		if err != nil {
			return src, err
		}
		if req.Insecure {
			src.Insecure = append(src.Insecure, host)
		}
		if req.RegistrySecret != "" {
			kc, err := b.secretKeychain(ctx, host, req.RegistrySecret)
			if err != nil {
				return src, err
			}
			src.Keychain = kc
		}
	}
	return src, nil
}

func (b *Builder) secretKeychain(ctx context.Context, host, name string) (oci.Keychain, error) {
	if b.Secrets == nil {
		return nil, fmt.Errorf("%w: this hostd keeps no secrets", ErrInvalid)
	}
	v, err := b.Secrets.SecretValue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("registry secret %s: %w", name, err)
	}
	user, pass, ok := strings.Cut(string(v), ":")
	if !ok {
		return nil, fmt.Errorf("%w: registry secret %s is not user:password", ErrInvalid, name)
	}
	return oci.StaticKeychain(host, user, pass), nil
}

// registryOf returns the registry ("host:port") of a registry reference.
func registryOf(ref string) (string, error) {
	return oci.RegistryOf(ref)
}

// Image returns template name's image record and config, or an error
// wrapping store.ErrNotFound.
func (b *Builder) Image(ctx context.Context, name string) (store.TemplateImage, imageconfig.Config, error) {
	ti, err := b.Store.GetTemplateImage(ctx, name)
	if err != nil {
		return ti, imageconfig.Config{}, err
	}
	var rec record
	err = json.Unmarshal(ti.Config, &rec)
	return ti, rec.Config, err
}

// KernelOf returns the own kernel of the template whose snapshot is
// snapshotID (the kernel of the image template it descends from), or nil
// for hostd's kernel.
func (b *Builder) KernelOf(ctx context.Context, snapshotID string) (*Kernel, error) {
	ti, err := b.Store.TemplateImageOfSnapshot(ctx, snapshotID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(ti.Config, &rec); err != nil {
		return nil, fmt.Errorf("template image %s: %w", ti.Name, err)
	}
	return rec.Kernel, nil
}
