package api

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// ArchiveManager is what the archive and watch handlers need.
type ArchiveManager interface {
	// PutArchive unpacks a tar (or gzip tar) stream under dir.
	PutArchive(ctx context.Context, id, dir string, r io.Reader) (sandbox.ArchiveResult, error)
	// GetArchive streams dir to w as tar.
	GetArchive(ctx context.Context, id, dir string, w io.Writer) error
	// Watch emits the changes under dir until ctx ends or the sandbox goes.
	Watch(ctx context.Context, id, dir string, recursive bool, emit func(sandbox.WatchEvent) error) error
}

var _ ArchiveManager = sandbox.Service{}

func (s *server) PutArchive(w http.ResponseWriter, r *http.Request, id SandboxID, params PutArchiveParams) {
	if err := checkPath(params.Path); err != nil {
		s.writeError(w, r, err)
		return
	}
	var body io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(params.ContentEncoding)); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			s.writeError(w, r, badRequest(CodeInvalidArchive, "gzip: %v", err))
			return
		}
		defer zr.Close()
		body = zr
	default:
		s.writeError(w, r, badRequest(CodeInvalidParam, "Content-Encoding %q is not supported (gzip is)", enc))
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	res, err := s.m.PutArchive(r.Context(), id, params.Path, body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ArchiveResult{Entries: res.Entries, Bytes: res.Bytes})
}

func (s *server) GetArchive(w http.ResponseWriter, r *http.Request, id SandboxID, params GetArchiveParams) {
	if !s.checkDir(w, r, id, params.Path) {
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	cw := &countWriter{w: w}
	err := s.m.GetArchive(r.Context(), id, params.Path, cw)
	switch {
	case err == nil:
	case cw.n == 0:
		s.writeError(w, r, err)
	case r.Context().Err() == nil:
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "archive read failed mid-stream",
			slog.String("sandbox_id", id), slog.String("path", params.Path),
			slog.Int64("bytes", cw.n), slog.Any("err", err))
		panic(http.ErrAbortHandler) // a failed transfer, not a short archive
	}
}

// checkDir answers an error and returns false unless p is a checked path
// to a directory of the sandbox.
func (s *server) checkDir(w http.ResponseWriter, r *http.Request, id, p string) bool {
	err := checkPath(p)
	var fi sandbox.FileInfo
	if err == nil {
		fi, err = s.m.Stat(r.Context(), id, p)
	}
	if err == nil && !fi.IsDir {
		err = badRequest(CodeNotADirectory, "%s is not a directory", p)
	}
	if err != nil {
		s.writeError(w, r, err)
		return false
	}
	return true
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (s *server) WatchDir(w http.ResponseWriter, r *http.Request, id SandboxID, params WatchDirParams) {
	if !s.checkDir(w, r, id, params.Path) {
		return
	}
	rc := http.NewResponseController(w)
	startNDJSON(w, rc)
	if err := rc.Flush(); err != nil {
		return
	}
	err := s.m.Watch(r.Context(), id, params.Path, params.Recursive, func(ev sandbox.WatchEvent) error {
		line, err := json.Marshal(WatchEvent{Type: WatchEventType(ev.Type), Path: ev.Path, OldPath: ev.OldPath,
			IsDir: ev.IsDir, Size: ev.Size, Time: ev.Time.UTC()})
		if err == nil {
			_, err = w.Write(append(line, '\n'))
		}
		if err == nil {
			err = rc.Flush()
		}
		return err
	})
	if err != nil && r.Context().Err() == nil {
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "watch ended",
			slog.String("sandbox_id", id), slog.String("path", params.Path), slog.Any("err", err))
	}
}
