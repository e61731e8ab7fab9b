package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/store"
)

// Error codes the gateway adds to hostd's.
const (
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeSandboxNotFound  = "sandbox_not_found"
	CodeSnapshotNotFound = "snapshot_not_found"
	CodeInvalid          = "invalid_request"
	CodeSandboxLost      = "sandbox_lost"
	CodeHostUnavailable  = "host_unavailable"
	CodeFleetUnavailable = "fleet_unavailable"
	CodeNoCapacity       = "fleet_capacity"
	CodeQuotaExceeded    = "quota_exceeded"
	CodeExists           = "already_exists"
	CodeKeyNotFound      = "key_not_found"
	CodeProjectNotFound  = "project_not_found"
	CodeProjectExists    = "project_exists"
	// CodeSandboxMoving is a call on a sandbox that a migrate or a drain
	// is moving between hosts: 503 with Retry-After (409 for a second
	// migrate); retry, and re-attach streams by offset.
	CodeSandboxMoving = "sandbox_moving"
	// CodeNotDurable is a migrate that cannot be: the fleet, or the
	// sandbox's host, has no snapshot store.
	CodeNotDurable = "not_durable"
)

// apiError is an error with its HTTP status and code.
type apiError struct {
	status     int
	code, msg  string
	retryAfter bool
}

func (e *apiError) Error() string { return e.msg }

func errorf(status int, code, format string, args ...any) error {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// writeError answers err as hostd would: {"error":{"code","message"}}.
func (g *Gateway) writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = g.classify(err)
	}
	if ae.retryAfter || ae.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", g.retryAfter())
	}
	if ae.status >= 500 {
		g.log.Warn("gateway error", "status", ae.status, "code", ae.code, "err", err)
	}
	writeJSON(w, ae.status, apitypes.Error{Error: apitypes.ErrorBody{Code: ae.code, Message: ae.msg}})
}

// classify maps the store's errors to statuses.
func (g *Gateway) classify(err error) *apiError {
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeFleetUnavailable,
			msg: "the fleet's database is unreachable; retry: " + err.Error()}
	case errors.Is(err, store.ErrQuota):
		return &apiError{status: http.StatusTooManyRequests, code: CodeQuotaExceeded, msg: err.Error()}
	case errors.Is(err, store.ErrNoCapacity):
		return &apiError{status: http.StatusInsufficientStorage, code: CodeNoCapacity, msg: err.Error()}
	case errors.Is(err, store.ErrExists):
		return &apiError{status: http.StatusConflict, code: CodeExists, msg: err.Error()}
	case errors.Is(err, store.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: CodeNotFound, msg: err.Error()}
	}
	return &apiError{status: http.StatusInternalServerError, code: "internal", msg: err.Error()}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a JSON request body of at most 1 MiB.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, CodeInvalid, "request body: %v", err)
	}
	return nil
}
