package api

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
)

// TemplateBuilds builds templates from a Dockerfile or a blueprint in an
// unpacked build context: the client's engines, run by hostd over its own
// API as the caller (internal/templatebuild). nil answers
// POST /v1/templates/build with 501.
type TemplateBuilds interface {
	// Build runs one build, calling events for its log and progress
	// events (never done or error: Build's result is those).
	Build(ctx context.Context, req ContextBuild, events func(TemplateBuildEvent)) (Template, error)
}

// ContextBuild is one build of POST /v1/templates/build.
type ContextBuild struct {
	Name string
	// Dir is the unpacked build context; exactly one of Dockerfile and
	// Blueprint is the file's slash-separated path in it.
	Dir                   string
	Dockerfile, Blueprint string
	BuildArgs             map[string]string
	PoolSize              int
	NoCache               bool
	// Authorization is the caller's Authorization header: the build's
	// calls to hostd's API are the caller's.
	Authorization string
}

// BuildError is a build's failure with the status and code it answers
// with (a bad Dockerfile is a 400, a step that failed a 422).
type BuildError struct {
	Status int
	Code   string
	Err    error
}

func (e *BuildError) Error() string { return e.Err.Error() }
func (e *BuildError) Unwrap() error { return e.Err }

// Build error codes.
const (
	CodeInvalidBuild = "invalid_build"
	CodeBuildFailed  = "build_failed"
)

// Bounds of an uploaded build context.
const (
	maxContextBytes   = 1 << 30
	maxContextEntries = 100_000
)

// BuildTemplateFromContext unpacks the uploaded context into a temporary
// directory and streams the build as NDJSON TemplateBuildEvents.
func (s *server) BuildTemplateFromContext(w http.ResponseWriter, r *http.Request, p BuildTemplateFromContextParams) {
	req, err := contextBuildRequest(p)
	if err == nil && s.builds == nil {
		err = &apiError{status: http.StatusNotImplemented, code: CodeInvalidRequest, msg: "this hostd builds no templates from a Dockerfile or blueprint"}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.buildDir != "" {
		if err := os.MkdirAll(s.buildDir, 0o700); err != nil {
			s.writeError(w, r, fmt.Errorf("build context: %w", err))
			return
		}
	}
	dir, err := os.MkdirTemp(s.buildDir, "build-context-")
	if err != nil {
		s.writeError(w, r, fmt.Errorf("build context: %w", err))
		return
	}
	defer os.RemoveAll(dir)
	if err := unpackContext(r.Body, dir); err != nil {
		s.writeError(w, r, err)
		return
	}
	file := req.Dockerfile + req.Blueprint
	if fi, err := os.Stat(dir + "/" + file); err != nil || !fi.Mode().IsRegular() {
		s.writeError(w, r, badRequest(CodeInvalidBuild, "the build context has no file %s", file))
		return
	}
	req.Dir = dir
	req.Authorization = r.Header.Get("Authorization")
	rc := http.NewResponseController(w)
	startNDJSON(w, rc) // no write deadline: a build may take long
	enc := json.NewEncoder(w)
	send := func(ev TemplateBuildEvent) {
		_ = enc.Encode(ev) // a client gone away ends the build through r's context
		_ = rc.Flush()
	}
	t, err := s.builds.Build(r.Context(), req, send)
	if err != nil {
		status, _ := errorFor(err)
		if status >= 500 {
			s.log.Error("template build failed", "template", req.Name, "err", err)
		}
		body := errorBody(err)
		send(TemplateBuildEvent{Type: TemplateBuildEventTypeError, Error: &body, Status: &status})
		return
	}
	send(TemplateBuildEvent{Type: TemplateBuildEventTypeDone, Template: &t})
}

// contextBuildRequest checks the parameters.
func contextBuildRequest(p BuildTemplateFromContextParams) (ContextBuild, error) {
	req := ContextBuild{Name: p.Name, BuildArgs: map[string]string{}}
	if p.Dockerfile != nil {
		req.Dockerfile = *p.Dockerfile
	}
	if p.Blueprint != nil {
		req.Blueprint = *p.Blueprint
	}
	if p.PoolSize != nil {
		req.PoolSize = *p.PoolSize
	}
	req.NoCache = p.NoCache != nil && *p.NoCache
	if (req.Dockerfile == "") == (req.Blueprint == "") {
		return req, badRequest(CodeInvalidParam, "give exactly one of dockerfile and blueprint")
	}
	if err := contextPath(req.Dockerfile + req.Blueprint); err != nil {
		return req, badRequest(CodeInvalidParam, "%v", err)
	}
	if p.BuildArg != nil {
		if req.Blueprint != "" && len(*p.BuildArg) > 0 {
			return req, badRequest(CodeInvalidParam, "build_arg is a Dockerfile's, not a blueprint's")
		}
		for _, kv := range *p.BuildArg {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return req, badRequest(CodeInvalidParam, "build_arg %q is not KEY=VALUE", kv)
			}
			req.BuildArgs[k] = v
		}
	}
	return req, nil
}

// contextPath checks a slash-separated path inside the context.
func contextPath(p string) error {
	if p == "" || path.IsAbs(p) || p != path.Clean(p) || p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("%q is not a clean relative path inside the build context", p)
	}
	return nil
}

// unpackContext unpacks a tar (or gzip tar) stream of regular files and
// directories under dir, through an os.Root so that no entry lands outside
// it. Symlinks, hard links and special files are refused: the build reads
// the context on hostd's machine, where a link could name any file.
func unpackContext(body io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer root.Close()
	br := bufio.NewReader(io.LimitReader(body, maxContextBytes+1))
	var r io.Reader = br
	if head, _ := br.Peek(2); bytes.Equal(head, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return badRequest(CodeInvalidArchive, "build context: %v", err)
		}
		defer zr.Close()
		r = io.LimitReader(zr, maxContextBytes+1)
	}
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return badRequest(CodeInvalidArchive, "build context: %v", err)
		}
		if n >= maxContextEntries {
			return badRequest(CodeInvalidArchive, "build context: more than %d entries", maxContextEntries)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if name == "" || name == "." {
			continue
		}
		if err := contextPath(name); err != nil {
			return badRequest(CodeInvalidArchive, "build context entry: %v", err)
		}
		if total += h.Size; total > maxContextBytes {
			return &apiError{status: http.StatusRequestEntityTooLarge, code: CodeFileTooLarge, msg: fmt.Sprintf("build context: over %d bytes", maxContextBytes)}
		}
		if err := unpackEntry(root, name, h, tr); err != nil {
			return err
		}
	}
}

func unpackEntry(root *os.Root, name string, h *tar.Header, r io.Reader) error {
	if d := path.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return badRequest(CodeInvalidArchive, "build context entry %s: %v", name, err)
		}
	}
	mode := os.FileMode(h.Mode).Perm() // no setuid bits on hostd's machine
	switch h.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(name, 0o755); err != nil {
			return badRequest(CodeInvalidArchive, "build context entry %s: %v", name, err)
		}
		return root.Chmod(name, mode|0o700)
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return badRequest(CodeInvalidArchive, "build context entry %s: %v", name, err)
		}
		_, err = io.Copy(f, r)
		if err = errors.Join(err, f.Close()); err != nil {
			return badRequest(CodeInvalidArchive, "build context entry %s: %v", name, err)
		}
		return root.Chmod(name, mode|0o400)
	}
	return badRequest(CodeInvalidArchive, "build context entry %s: only regular files and directories, not %q", name, h.Typeflag)
}
