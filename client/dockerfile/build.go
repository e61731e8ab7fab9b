package dockerfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/blueprint"
)

// BuildOptions configure Build.
type BuildOptions struct {
	// Context is the build context directory (default: the Dockerfile's).
	Context string
	// BuildArgs are --build-arg values.
	BuildArgs map[string]string
	// Image is how a FROM image is pulled: its Ref is ignored (the FROM
	// line's is used), the rest (insecure, registry secret, free space,
	// memory) applies.
	Image client.ImageSource
	// ImageProgress, if set, receives the image template build's events.
	ImageProgress func(client.BuildEvent)
	// Out, Err, Pool, NoCache are blueprint's (NoCache also rebuilds a
	// FROM image's template).
	Out, Err io.Writer
	Pool     int
	NoCache  bool
}

// Build builds the Dockerfile at file into template name.
func Build(ctx context.Context, c *client.Client, name, file string, opts BuildOptions) (client.Template, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return client.Template{}, fmt.Errorf("dockerfile: %w", err)
	}
	f, err := Parse(src, opts.BuildArgs)
	if err != nil {
		return client.Template{}, fmt.Errorf("%s: %w", file, err)
	}
	bp, base, err := resolveFrom(ctx, c, f, opts)
	if err != nil {
		return client.Template{}, fmt.Errorf("%s: %w", file, err)
	}
	if opts.Context == "" {
		opts.Context = filepath.Dir(file)
	}
	tr, err := f.Translate(opts.Context, base)
	if err != nil {
		return client.Template{}, fmt.Errorf("%s: %w", file, err)
	}
	bp.Steps = tr.Steps
	return blueprint.Build(ctx, c, name, bp, blueprint.BuildOptions{Out: opts.Out, Err: opts.Err, Pool: opts.Pool,
		NoCache: opts.NoCache, BaseDir: opts.Context})
}

// ImageTemplateName is the template a FROM image is built into (with
// hostd's kernel, or with kernel and modules).
func ImageTemplateName(ref string, kernel ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(append([]string{ref}, kernel...), "\x00")))
	return "image-" + hex.EncodeToString(sum[:])[:12]
}

// Origin kinds, as From returns them.
const (
	FromBase     = "base"
	FromTemplate = "template"
	FromImage    = "image"
)

// From classifies a FROM argument without asking hostd: an explicit
// "base:" or "template:" prefix, else "" (a template if one has that
// name, else an image).
func From(arg string) (kind, name string) {
	switch {
	case strings.HasPrefix(arg, "base:"):
		return FromBase, strings.TrimPrefix(arg, "base:")
	case strings.HasPrefix(arg, "template:"):
		return FromTemplate, strings.TrimPrefix(arg, "template:")
	}
	return "", arg
}

// resolveFrom turns the FROM line into the blueprint's origin and the
// config it starts with, building (or reusing) an image's template.
func resolveFrom(ctx context.Context, c *client.Client, f *File, opts BuildOptions) (blueprint.Blueprint, Config, error) {
	lineErr := func(err error) error { return &LineError{Line: f.FromLine, Err: err} }
	kind, name := From(f.From)
	if opts.Image.Kernel != "" || opts.Image.Modules != "" {
		if kind != "" {
			return blueprint.Blueprint{}, Config{}, lineErr(errors.New("a kernel applies to a FROM image's template only, not to FROM " + f.From))
		}
		if _, err := c.GetTemplate(ctx, name); client.IsTemplateName(name) && err == nil {
			return blueprint.Blueprint{}, Config{}, lineErr(fmt.Errorf("a kernel applies to a FROM image's template only, and %s is a template", name))
		}
	}
	switch {
	case f.From == "scratch":
		return blueprint.Blueprint{}, Config{}, lineErr(errors.New("FROM scratch is not supported: start from an image, a template or base:debian-bookworm"))
	case kind == FromBase:
		if !slices.Contains(blueprint.Bases, name) {
			return blueprint.Blueprint{}, Config{}, lineErr(fmt.Errorf("unknown base %q (hostd has %s)", name, strings.Join(blueprint.Bases, ", ")))
		}
		return blueprint.Blueprint{Base: name}, Config{}, nil
	case kind == FromTemplate:
		t, err := c.GetTemplate(ctx, name)
		if err != nil {
			return blueprint.Blueprint{}, Config{}, lineErr(fmt.Errorf("template %s: %w", name, err))
		}
		return blueprint.Blueprint{Template: name}, imageConfig(t), nil
	}
	// A name that cannot be a template's (an image reference with a
	// registry or a path) is an image's.
	if client.IsTemplateName(name) {
		if t, err := c.GetTemplate(ctx, name); err == nil {
			return blueprint.Blueprint{Template: name}, imageConfig(t), nil
		} else if !isNotFound(err) {
			return blueprint.Blueprint{}, Config{}, lineErr(err)
		}
	}
	t, err := imageTemplate(ctx, c, name, opts)
	if err != nil {
		return blueprint.Blueprint{}, Config{}, lineErr(err)
	}
	return blueprint.Blueprint{Template: t.Name}, imageConfig(t), nil
}

// imageTemplate builds ref's image template, or reuses it.
func imageTemplate(ctx context.Context, c *client.Client, ref string, opts BuildOptions) (client.Template, error) {
	name := ImageTemplateName(ref)
	if opts.Image.Kernel != "" {
		name = ImageTemplateName(ref, opts.Image.Kernel, opts.Image.Modules)
	}
	if t, err := c.GetTemplate(ctx, name); err == nil && !opts.NoCache && t.Image != nil && t.Image.Ref == ref {
		if opts.Out != nil {
			fmt.Fprintf(opts.Out, "FROM image %s: template %s (reused)\n", ref, name)
		}
		return t, nil
	}
	if opts.Out != nil {
		fmt.Fprintf(opts.Out, "FROM image %s: building template %s\n", ref, name)
	}
	img := opts.Image
	img.Ref = ref
	t, err := c.BuildTemplateFromImage(ctx, name, 0, img, opts.ImageProgress)
	if err != nil {
		return client.Template{}, fmt.Errorf("image %s: %w", ref, err)
	}
	return t, nil
}

// imageConfig is the config a template's image set, if it has one.
func imageConfig(t client.Template) Config {
	im := t.Image
	if im == nil {
		return Config{}
	}
	var cfg Config
	if im.Env != nil {
		cfg.Env = *im.Env
	}
	if im.WorkingDir != nil {
		cfg.WorkingDir = *im.WorkingDir
	}
	if im.User != nil {
		cfg.User = *im.User
	}
	if im.Entrypoint != nil {
		cfg.Entrypoint = *im.Entrypoint
	}
	if im.Cmd != nil {
		cfg.Cmd = *im.Cmd
	}
	if im.ExposedPorts != nil {
		cfg.ExposedPorts = *im.ExposedPorts
	}
	return cfg
}

func isNotFound(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == 404
}
