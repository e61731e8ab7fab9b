package api

import (
	"context"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// LimitManager is what the limits and lifecycle handlers need.
type LimitManager interface {
	ExtendTimeout(ctx context.Context, id string, timeoutS int) (sandbox.Info, error)
	Usage(ctx context.Context, id string) (sandbox.Usage, error)
}

func (s *server) ExtendTimeout(w http.ResponseWriter, r *http.Request, id SandboxID) {
	var req TimeoutRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := seconds("timeout_s", req.TimeoutS, maxLifetimeS); err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.m.ExtendTimeout(r.Context(), id, req.TimeoutS)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toSandbox(info))
}

func (s *server) GetUsage(w http.ResponseWriter, r *http.Request, id SandboxID) {
	u, err := s.m.Usage(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Usage{CPUSeconds: u.CPUSeconds, MemoryPeakBytes: int64(u.MemoryPeakBytes),
		MemoryBytes: int64(u.MemoryBytes), DiskUsedBytes: u.DiskUsedBytes, BytesIn: u.BytesIn, BytesOut: u.BytesOut})
}

// GetMetrics serves the operator metrics. The route is guarded like every
// /v1 route: the metrics name sandboxes and templates, which are the API
// key holder's business.
func (s *server) GetMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metrics == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: CodeNotFound, msg: "metrics are not enabled"})
		return
	}
	s.metrics.ServeHTTP(w, r)
}

func limitsOf(req CreateSandboxRequest) sandbox.Limits {
	return sandbox.Limits{CPUQuota: req.CPUQuota, HostMemoryMiB: req.HostMemoryMiB, DiskMiB: req.DiskMiB, DiskBps: req.DiskBps, NetBps: req.NetBps,
		MaxPids: req.MaxPids, ExecTimeoutS: req.ExecTimeoutS, IdleTimeoutS: req.IdleTimeoutS, OnTimeout: string(req.OnTimeout)}
}

func toLimits(l sandbox.Limits) *Limits {
	return &Limits{CPUQuota: l.CPUQuota, HostMemoryMiB: l.HostMemoryMiB, DiskMiB: l.DiskMiB, DiskBps: l.DiskBps, NetBps: l.NetBps,
		MaxPids: l.MaxPids, ExecTimeoutS: l.ExecTimeoutS, IdleTimeoutS: l.IdleTimeoutS, OnTimeout: l.OnTimeout}
}

func deadline(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
