package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"syscall"

	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/images/oci"
)

// Error codes: stable, snake_case, listed in openapi.yaml's description.
const (
	CodeBadBody           = "bad_body"
	CodeInvalidParam      = "invalid_param"
	CodeInvalidRequest    = "invalid_request"
	CodeBadPath           = "bad_path"
	CodeInvalidArchive    = "invalid_archive"
	CodeIsDirectory       = "is_directory"
	CodeNotADirectory     = "not_a_directory"
	CodeUnauthorized      = "unauthorized"
	CodePermissionDenied  = "permission_denied"
	CodeSandboxNotFound   = "sandbox_not_found"
	CodeFileNotFound      = "file_not_found"
	CodeNotFound          = "not_found"
	CodeMethodNotAllowed  = "method_not_allowed"
	CodeSandboxNotRunning = "sandbox_not_running"
	CodeSandboxDeleted    = "sandbox_deleted"
	CodeFileExists        = "file_exists"
	CodeDirectoryNotEmpty = "directory_not_empty"
	CodeExecFailed        = "exec_failed"
	CodeTimeout           = "timeout"
	CodeInternal          = "internal"
	CodeSnapshotInUse     = "snapshot_in_use"
	CodeSnapshotCorrupt   = "snapshot_corrupt"
	CodeNotDurable        = "sandbox_not_durable"
	CodeStoreUnavailable  = "snapshot_store_unavailable"
	CodeSandboxPaused     = "sandbox_paused"
	CodeBadImage          = "bad_image"
	CodeImageTooLarge     = "image_too_large"
	CodeRegistry          = "registry_error"
	CodeRegistryAuth      = "registry_auth"
	CodeSnapshotNotFound  = "snapshot_not_found"
	CodeTemplateNotFound  = "template_not_found"
	CodeNameTooLong       = "name_too_long"
	CodeCrossDevice       = "cross_device"
	CodeNoSpace           = "no_space"
	CodeReadOnly          = "read_only_filesystem"
	CodeTooManyLinks      = "too_many_links"
	CodeFileBusy          = "file_busy"
	CodeFileTooLarge      = "file_too_large"
	CodeAgentLost         = "agent_unreachable"
	CodeHostCapacity      = "host_capacity"
	CodeNoCommonSnapshot  = "no_common_snapshot"
	CodeGuestNoDiff       = "diff_unsupported_guest"
)

// apiError is an error that the API itself decided on (bad input, unknown
// route). It carries its status and code to errorFor.
type apiError struct {
	status int
	code   string
	msg    string
	err    error
}

func (e *apiError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *apiError) Unwrap() error { return e.err }

func badRequest(code, format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, code: code, msg: fmt.Sprintf(format, args...)}
}

var errUnauthorized = fmt.Errorf("%w: no authenticator configured", auth.ErrUnauthorized)

// statusRules map wrapped errors to statuses, first match wins. Order
// matters: ENOTEMPTY is also fs.ErrExist, EISDIR and ENOTDIR come before the
// generic file errors.
var statusRules = []struct {
	target error
	status int
	code   string
}{
	{auth.ErrUnauthorized, http.StatusUnauthorized, CodeUnauthorized},
	{sandbox.ErrSnapshotNotFound, http.StatusNotFound, CodeSnapshotNotFound},
	{sandbox.ErrTemplateNotFound, http.StatusNotFound, CodeTemplateNotFound},
	{sandbox.ErrNotFound, http.StatusNotFound, CodeSandboxNotFound},
	{sandbox.ErrInUse, http.StatusConflict, CodeSnapshotInUse},
	{sandbox.ErrCorrupt, http.StatusUnprocessableEntity, CodeSnapshotCorrupt},
	{sandbox.ErrIncompatible, http.StatusUnprocessableEntity, CodeSnapshotCorrupt},
	{sandbox.ErrPaused, http.StatusConflict, CodeSandboxPaused},
	{sandbox.ErrDeleted, http.StatusConflict, CodeSandboxDeleted},
	{sandbox.ErrNotRunning, http.StatusConflict, CodeSandboxNotRunning},
	{sandbox.ErrAgentLost, http.StatusBadGateway, CodeAgentLost},
	{sandbox.ErrBadPath, http.StatusBadRequest, CodeBadPath},
	{sandbox.ErrBadArchive, http.StatusBadRequest, CodeInvalidArchive},
	{sandbox.ErrNoCommonSnapshot, http.StatusConflict, CodeNoCommonSnapshot},
	{sandbox.ErrGuestNoDiff, http.StatusUnprocessableEntity, CodeGuestNoDiff},
	{sandbox.ErrInvalid, http.StatusBadRequest, CodeInvalidRequest},
	{sandbox.ErrCapacity, http.StatusServiceUnavailable, CodeHostCapacity},
	{sandbox.ErrNotDurable, http.StatusConflict, CodeNotDurable},
	{sandbox.ErrStoreUnavailable, http.StatusServiceUnavailable, CodeStoreUnavailable},
	{sandbox.ErrExecStart, http.StatusUnprocessableEntity, CodeExecFailed},
	{oci.ErrBadRef, http.StatusBadRequest, CodeInvalidRequest},
	{oci.ErrPlainHTTP, http.StatusBadRequest, CodeInvalidRequest},
	{oci.ErrTooLarge, http.StatusUnprocessableEntity, CodeImageTooLarge},
	{oci.ErrNotImage, http.StatusUnprocessableEntity, CodeBadImage},
	{oci.ErrDigest, http.StatusUnprocessableEntity, CodeBadImage},
	{oci.ErrUnsafePath, http.StatusUnprocessableEntity, CodeBadImage},
	{oci.ErrRegistryAuth, http.StatusUnprocessableEntity, CodeRegistryAuth},
	{oci.ErrRegistry, http.StatusBadGateway, CodeRegistry},
	{syscall.EISDIR, http.StatusBadRequest, CodeIsDirectory},
	{syscall.ENOTDIR, http.StatusBadRequest, CodeNotADirectory},
	{syscall.ENOTEMPTY, http.StatusConflict, CodeDirectoryNotEmpty},
	// Guest errnos that are the caller's doing, with their meaning (not
	// EINVAL or EBUSY: from the host's own calls they would blame the
	// caller for hostd's trouble).
	{syscall.ENAMETOOLONG, http.StatusBadRequest, CodeNameTooLong},
	{syscall.ELOOP, http.StatusBadRequest, CodeTooManyLinks},
	{syscall.EXDEV, http.StatusConflict, CodeCrossDevice},
	{syscall.EROFS, http.StatusConflict, CodeReadOnly},
	{syscall.ETXTBSY, http.StatusConflict, CodeFileBusy},
	{syscall.EFBIG, http.StatusRequestEntityTooLarge, CodeFileTooLarge},
	{syscall.ENOSPC, http.StatusInsufficientStorage, CodeNoSpace},
	{syscall.EDQUOT, http.StatusInsufficientStorage, CodeNoSpace},
	{fs.ErrNotExist, http.StatusNotFound, CodeFileNotFound},
	{fs.ErrPermission, http.StatusForbidden, CodePermissionDenied},
	{fs.ErrExist, http.StatusConflict, CodeFileExists},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, CodeTimeout},
}

// errorFor is the one place where errors become HTTP statuses and codes.
func errorFor(err error) (status int, code string) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status, ae.code
	}
	var be *BuildError
	if errors.As(err, &be) {
		return be.Status, be.Code
	}
	for _, rule := range statusRules {
		if errors.Is(err, rule.target) {
			return rule.status, rule.code
		}
	}
	return http.StatusInternalServerError, CodeInternal
}

// writeError answers r with err as a JSON error.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := errorFor(err)
	if status >= 500 {
		s.log.LogAttrs(r.Context(), slog.LevelError, "api error",
			slog.String("sandbox_id", r.PathValue("id")),
			slog.String("route", r.Pattern),
			slog.String("code", code),
			slog.Any("err", err))
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentbox"`)
	}
	writeJSON(w, status, Error{Error: errorBody(err)})
}

// errorBody is err as the API's error object.
func errorBody(err error) ErrorBody {
	_, code := errorFor(err)
	return ErrorBody{Code: code, Message: err.Error()}
}

// paramError answers the generated wrapper's parameter binding failures.
func (s *server) paramError(w http.ResponseWriter, r *http.Request, err error) {
	s.writeError(w, r, &apiError{status: http.StatusBadRequest, code: CodeInvalidParam, msg: "bad parameter", err: err})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	// The status is sent; an encoding error here means the client went away.
	_ = json.NewEncoder(w).Encode(v)
}
