package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Sentinel errors of the agent, returned as ttrpc statuses.
var (
	errNoSession = errors.New("agent: no such session")
	errNoHandle  = errors.New("agent: no such handle")
	errBadPath   = errors.New("agent: path must be absolute")
	errBadArgs   = errors.New("agent: bad arguments")
	errTooMany   = errors.New("agent: too many open handles")
)

// toStatus turns err into a ttrpc status error. Errors from system calls keep
// their errno in an ErrnoDetail so the host can rebuild them.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codeOf(err)
	st := status.New(code, strings.ToValidUTF8(err.Error(), "\uFFFD"))
	var errno syscall.Errno
	if errors.As(err, &errno) {
		d := &agentv1.ErrnoDetail{Errno: uint32(errno)}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			d.Op, d.Path = pe.Op, []byte(pe.Path)
		}
		var le *os.LinkError
		if errors.As(err, &le) {
			d.Op, d.Path = le.Op, []byte(le.Old)
		}
		if withD, derr := st.WithDetails(d); derr == nil {
			st = withD
		}
	}
	return st.Err()
}

func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, errNoSession), errors.Is(err, errNoHandle), errors.Is(err, fs.ErrNotExist),
		errors.Is(err, exec.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, fs.ErrPermission):
		return codes.PermissionDenied
	case errors.Is(err, fs.ErrExist):
		return codes.AlreadyExists
	case errors.Is(err, errBadPath), errors.Is(err, errBadArgs):
		return codes.InvalidArgument
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENOTEMPTY):
		return codes.FailedPrecondition
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, errTooMany):
		return codes.ResourceExhausted
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Internal
}
