package api

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// defaultFileMode is the mode of a file written without ?mode=.
const defaultFileMode = 0o644

// checkPath refuses guest paths that are relative, contain a ".." element
// or a NUL byte. The guest agent checks again; this answers early and
// uniformly.
func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return badRequest(CodeBadPath, "path %q is not absolute", p)
	case strings.ContainsRune(p, 0):
		return badRequest(CodeBadPath, "path contains a NUL byte")
	}
	for elem := range strings.SplitSeq(p, "/") {
		if elem == ".." {
			return badRequest(CodeBadPath, "path %q contains \"..\"", p)
		}
	}
	return nil
}

func (s *server) ReadFile(w http.ResponseWriter, r *http.Request, id SandboxID, params ReadFileParams) {
	if err := checkPath(params.Path); err != nil {
		s.writeError(w, r, err)
		return
	}
	rc, err := s.m.ReadFile(r.Context(), id, params.Path)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer rc.Close()
	// A large file may take longer than the server's write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	n, err := io.Copy(w, rc)
	switch {
	case err == nil:
	case n == 0:
		// Nothing was sent yet, so the status can still say what went wrong.
		s.writeError(w, r, err)
	case r.Context().Err() == nil:
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "file read failed mid-stream",
			slog.String("sandbox_id", id), slog.String("path", params.Path),
			slog.Int64("bytes", n), slog.Any("err", err))
		// Abort the response so the client sees a failed transfer rather
		// than a complete-looking short file.
		panic(http.ErrAbortHandler)
	}
}

func (s *server) WriteFile(w http.ResponseWriter, r *http.Request, id SandboxID, params WriteFileParams) {
	err := checkPath(params.Path)
	if err == nil && strings.HasSuffix(params.Path, "/") {
		// A trailing slash names a directory; the agent would clean it
		// away and write the file beside it.
		err = badRequest(CodeBadPath, "path %q ends in '/': a file's path names the file", params.Path)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	mode, err := parseMode(params.Mode)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if err := s.m.WriteFile(r.Context(), id, params.Path, mode, r.Body); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// parseMode reads octal permission bits ("644", "0755", "4755") into an
// fs.FileMode.
func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return defaultFileMode, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, badRequest(CodeInvalidParam, "mode %q is not octal permission bits", s)
	}
	mode := fs.FileMode(n & 0o777)
	for _, b := range specialBits {
		if uint32(n)&b.unix != 0 {
			mode |= b.mode
		}
	}
	return mode, nil
}

// specialBits pairs Unix setuid, setgid and sticky bits with Go's.
var specialBits = []struct {
	unix uint32
	mode fs.FileMode
}{
	{0o4000, fs.ModeSetuid},
	{0o2000, fs.ModeSetgid},
	{0o1000, fs.ModeSticky},
}

// unixMode is the inverse of parseMode.
func unixMode(m fs.FileMode) int {
	n := uint32(m.Perm())
	for _, b := range specialBits {
		if m&b.mode != 0 {
			n |= b.unix
		}
	}
	return int(n)
}

func (s *server) RemoveFile(w http.ResponseWriter, r *http.Request, id SandboxID, params RemoveFileParams) {
	s.pathOp(w, r, params.Path, func(ctx context.Context) error {
		return s.m.Remove(ctx, id, params.Path, params.Recursive)
	})
}

func (s *server) MakeDir(w http.ResponseWriter, r *http.Request, id SandboxID, params MakeDirParams) {
	s.pathOp(w, r, params.Path, func(ctx context.Context) error {
		return s.m.Mkdir(ctx, id, params.Path)
	})
}

// pathOp checks path, runs op and answers 204 or op's error.
func (s *server) pathOp(w http.ResponseWriter, r *http.Request, path string, op func(context.Context) error) {
	err := checkPath(path)
	if err == nil {
		err = op(r.Context())
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) MoveFile(w http.ResponseWriter, r *http.Request, id SandboxID) {
	var req MoveRequest
	err := decodeJSON(w, r, maxJSONBody, &req, false)
	if err == nil {
		err = checkPath(req.From)
	}
	if err == nil {
		err = checkPath(req.To)
	}
	if err == nil {
		err = checkMove(req.From, req.To)
	}
	if err == nil {
		err = s.m.Rename(r.Context(), id, req.From, req.To)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkMove refuses the moves that the guest's rename(2) answers with
// EBUSY or EINVAL, which would be 500s: moving / or onto /, and moving a
// directory into itself.
func checkMove(from, to string) error {
	from, to = path.Clean(from), path.Clean(to)
	switch {
	case from == "/" || to == "/":
		return badRequest(CodeBadPath, "cannot move / or onto /")
	case from != to && strings.HasPrefix(to, from+"/"):
		return badRequest(CodeBadPath, "cannot move %s into itself (%s)", from, to)
	}
	return nil
}

func (s *server) ListDir(w http.ResponseWriter, r *http.Request, id SandboxID, params ListDirParams) {
	if err := checkPath(params.Path); err != nil {
		s.writeError(w, r, err)
		return
	}
	limit := defaultListLimit
	if params.Limit != nil {
		limit = *params.Limit
	}
	var after string
	if params.Cursor != nil {
		a, err := decodeListCursor(*params.Cursor)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		after = a
	}
	page, err := s.m.ListDirPage(r.Context(), id, params.Path, after, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list := FileList{Entries: make([]FileInfo, 0, len(page.Entries))}
	for _, fi := range page.Entries {
		list.Entries = append(list.Entries, toFileInfo(fi))
	}
	if page.More && len(page.Entries) > 0 {
		list.NextCursor = encodeListCursor(page.Entries[len(page.Entries)-1].Name)
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) StatFile(w http.ResponseWriter, r *http.Request, id SandboxID, params StatFileParams) {
	if err := checkPath(params.Path); err != nil {
		s.writeError(w, r, err)
		return
	}
	fi, err := s.m.Stat(r.Context(), id, params.Path)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toFileInfo(fi))
}

// toFileInfo spells a guest file for the API. A name or path that is not
// UTF-8 also comes as its exact bytes, base64 (raw_name, raw_path; see
// FileInfo in openapi.yaml); JSON shows the rest as U+FFFD.
func toFileInfo(fi sandbox.FileInfo) FileInfo {
	return FileInfo{
		Name:    strings.ToValidUTF8(fi.Name, "\uFFFD"),
		Path:    strings.ToValidUTF8(fi.Path, "\uFFFD"),
		RawName: rawBytes(fi.Name),
		RawPath: rawBytes(fi.Path),
		Size:    fi.Size,
		Mode:    unixMode(fi.Mode),
		ModTime: fi.ModTime.UTC(),
		IsDir:   fi.IsDir,
	}
}

// rawBytes is s's bytes when s is not valid UTF-8, else nil.
func rawBytes(s string) *[]byte {
	if utf8.ValidString(s) {
		return nil
	}
	b := []byte(s)
	return &b
}
