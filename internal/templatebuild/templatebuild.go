// Package templatebuild builds templates from a Dockerfile or a blueprint
// for hostd's POST /v1/templates/build. It runs the client's engines
// (client/dockerfile, client/blueprint) in hostd's process, over hostd's
// own API with the caller's credentials: a build is exactly what
// `agentbox template build` does, with the same step cache, and every call
// it makes is checked as the caller's. (hostd does not import the client:
// its main wires this package in through api.TemplateBuilds.)
package templatebuild

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/blueprint"
	"github.com/agentbox/agentbox/client/dockerfile"
	"github.com/agentbox/agentbox/hostd/api"
)

// Builder implements api.TemplateBuilds.
type Builder struct {
	// URL returns the address of hostd's own API (http://127.0.0.1:PORT),
	// which the builds call; "" until hostd listens.
	URL func() string
}

var _ api.TemplateBuilds = (*Builder)(nil)

// Build runs one build.
func (b *Builder) Build(ctx context.Context, req api.ContextBuild, events func(api.TemplateBuildEvent)) (api.Template, error) {
	url := ""
	if b.URL != nil {
		url = b.URL()
	}
	if url == "" {
		return api.Template{}, errors.New("templatebuild: hostd's own address is not known yet")
	}
	c, err := client.NewWithHTTPClient(url, strings.TrimPrefix(req.Authorization, "Bearer "), loopbackHTTP(url))
	if err != nil {
		return api.Template{}, err
	}
	var mu sync.Mutex // the engines write from one goroutine, but be sure
	emit := func(ev api.TemplateBuildEvent) {
		mu.Lock()
		defer mu.Unlock()
		events(ev)
	}
	out, errw := newLineWriter(apitypes.TemplateBuildEventStreamStdout, emit), newLineWriter(apitypes.TemplateBuildEventStreamStderr, emit)
	defer out.Flush()
	defer errw.Flush()
	var t client.Template
	if req.Dockerfile != "" {
		t, err = buildDockerfile(ctx, c, req, out, errw, emit)
	} else {
		t, err = buildBlueprint(ctx, c, req, out, errw)
	}
	if err != nil {
		return api.Template{}, classify(err)
	}
	return t, nil
}

// loopbackHTTP is the client for hostd's own API. Over TLS it skips the
// certificate check: the address is hostd's own listener on loopback,
// which a certificate for hostd's domain does not name.
func loopbackHTTP(url string) *http.Client {
	if !strings.HasPrefix(url, "https://") {
		return &http.Client{}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // hostd's own loopback listener
	return &http.Client{Transport: tr}
}

func buildDockerfile(ctx context.Context, c *client.Client, req api.ContextBuild, out, errw *lineWriter, emit func(api.TemplateBuildEvent)) (client.Template, error) {
	file := filepath.Join(req.Dir, filepath.FromSlash(req.Dockerfile))
	src, err := os.ReadFile(file)
	if err != nil {
		return client.Template{}, err
	}
	if _, err := dockerfile.Parse(src, req.BuildArgs); err != nil {
		return client.Template{}, invalid(fmt.Errorf("%s: %w", req.Dockerfile, err))
	}
	progress := func(ev client.BuildEvent) {
		if ev.Type == apitypes.TemplateBuildEventTypeProgress {
			emit(ev)
		}
	}
	return dockerfile.Build(ctx, c, req.Name, file, dockerfile.BuildOptions{Context: req.Dir, BuildArgs: req.BuildArgs,
		ImageProgress: progress, Out: out, Err: errw, Pool: req.PoolSize, NoCache: req.NoCache})
}

func buildBlueprint(ctx context.Context, c *client.Client, req api.ContextBuild, out, errw *lineWriter) (client.Template, error) {
	file := filepath.Join(req.Dir, filepath.FromSlash(req.Blueprint))
	src, err := os.ReadFile(file)
	if err != nil {
		return client.Template{}, err
	}
	bp, err := blueprint.Parse(src)
	if err != nil {
		return client.Template{}, invalid(fmt.Errorf("%s: %w", req.Blueprint, err))
	}
	base := filepath.Dir(file)
	for i, s := range bp.Steps {
		if s.Copy != nil && !inside(req.Dir, base, s.Copy.Src) {
			return client.Template{}, invalid(fmt.Errorf("%s: step %d: copy source %s is outside the build context", req.Blueprint, i+1, s.Copy.Src))
		}
	}
	return blueprint.Build(ctx, c, req.Name, bp, blueprint.BuildOptions{Out: out, Err: errw, Pool: req.PoolSize,
		NoCache: req.NoCache, BaseDir: base})
}

// inside reports whether copy source src, relative to base, is in dir
// (the context holds no symlinks: hostd refuses them).
func inside(dir, base, src string) bool {
	p := filepath.FromSlash(src)
	if filepath.IsAbs(p) {
		return false
	}
	rel, err := filepath.Rel(dir, filepath.Join(base, p))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func invalid(err error) error {
	return &api.BuildError{Status: http.StatusBadRequest, Code: api.CodeInvalidBuild, Err: err}
}

// classify gives an engine's error the status the build answers with: a
// bad Dockerfile line is the request's (400), a step that failed is 422,
// an API call's refusal keeps its status and code.
func classify(err error) error {
	var (
		be *api.BuildError
		le *dockerfile.LineError
		se *blueprint.StepError
		ae *client.APIError
	)
	switch {
	case errors.As(err, &be):
		return err
	case errors.As(err, &se):
		return &api.BuildError{Status: http.StatusUnprocessableEntity, Code: api.CodeBuildFailed, Err: err}
	case errors.As(err, &le):
		return invalid(err)
	case errors.As(err, &ae) && ae.Status >= 400:
		return &api.BuildError{Status: ae.Status, Code: ae.Code, Err: err}
	case errors.As(err, &ae):
		return &api.BuildError{Status: http.StatusUnprocessableEntity, Code: ae.Code, Err: err}
	}
	return err
}
