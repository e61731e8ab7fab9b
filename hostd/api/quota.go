package api

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
)

// Quota bounds what one project holds at once, beside the per-key maximums
// of each sandbox; a zero field is no bound.
type Quota struct {
	// Sandboxes counts every sandbox that is not deleted or failed.
	Sandboxes int `json:"sandboxes,omitempty"`
	// MemoryMiB and VCPUs sum the sandboxes that are not paused.
	MemoryMiB int `json:"memory_mib,omitempty"`
	VCPUs     int `json:"vcpus,omitempty"`
	// SnapshotBytes sums the project's snapshots; a snapshot is refused
	// once they reach it.
	SnapshotBytes int64 `json:"snapshot_bytes,omitempty"`
}

// usage is what a project holds or is being given.
type usage struct{ sandboxes, memoryMiB, vcpus int }

// quotas admits the creates, forks and resumes of projects with a Quota.
// Admissions in flight are reserved, so concurrent creates cannot together
// pass a quota that each alone would not.
type quotas struct {
	byProject map[string]Quota
	// defaultVCPUs and defaultMemoryMiB size a create that asks for 0.
	defaultVCPUs, defaultMemoryMiB int
	mu                             sync.Mutex
	pending                        map[string]usage
}

func quotaExceeded(project, name string, limit, have, want int64) error {
	return &apiError{status: http.StatusTooManyRequests, code: CodeQuotaExceeded,
		msg: fmt.Sprintf("project %s: quota %s is %d (in use %d, asked %d)", project, name, limit, have, want)}
}

// admit reserves n sandboxes of vcpus and memoryMiB each (n = 0: a resume
// of one) for the caller's project, or refuses over its quota. The caller
// calls release once the sandboxes exist (or failed to).
func (s *server) admit(ctx context.Context, n, vcpus, memoryMiB int) (release func(), err error) {
	project := caller(ctx).Project
	q, ok := s.quotas.byProject[project]
	if !ok || s.tenancy == nil {
		return func() {}, nil
	}
	if vcpus == 0 {
		vcpus = max(s.quotas.defaultVCPUs, 1)
	}
	if memoryMiB == 0 {
		memoryMiB = s.quotas.defaultMemoryMiB
	}
	running := max(n, 1)
	want := usage{sandboxes: n, vcpus: vcpus * running, memoryMiB: memoryMiB * running}
	s.quotas.mu.Lock()
	defer s.quotas.mu.Unlock()
	have, err := s.usageOf(ctx, project)
	if err != nil {
		return nil, err
	}
	p := s.quotas.pending[project]
	have = usage{have.sandboxes + p.sandboxes, have.memoryMiB + p.memoryMiB, have.vcpus + p.vcpus}
	switch {
	case q.Sandboxes > 0 && want.sandboxes > 0 && have.sandboxes+want.sandboxes > q.Sandboxes:
		return nil, quotaExceeded(project, "sandboxes", int64(q.Sandboxes), int64(have.sandboxes), int64(want.sandboxes))
	case q.MemoryMiB > 0 && have.memoryMiB+want.memoryMiB > q.MemoryMiB:
		return nil, quotaExceeded(project, "memory_mib", int64(q.MemoryMiB), int64(have.memoryMiB), int64(want.memoryMiB))
	case q.VCPUs > 0 && have.vcpus+want.vcpus > q.VCPUs:
		return nil, quotaExceeded(project, "vcpus", int64(q.VCPUs), int64(have.vcpus), int64(want.vcpus))
	}
	if s.quotas.pending == nil {
		s.quotas.pending = map[string]usage{}
	}
	s.quotas.pending[project] = usage{p.sandboxes + want.sandboxes, p.memoryMiB + want.memoryMiB, p.vcpus + want.vcpus}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.quotas.mu.Lock()
			defer s.quotas.mu.Unlock()
			p := s.quotas.pending[project]
			s.quotas.pending[project] = usage{p.sandboxes - want.sandboxes, p.memoryMiB - want.memoryMiB, p.vcpus - want.vcpus}
		})
	}, nil
}

// usageOf sums the sandboxes of project.
func (s *server) usageOf(ctx context.Context, project string) (usage, error) {
	owners, err := s.tenancy.Owners(ctx, store.KindSandbox)
	if err != nil {
		return usage{}, err
	}
	infos, err := s.m.List(ctx)
	if err != nil {
		return usage{}, err
	}
	var u usage
	for _, info := range infos {
		if owners[info.ID].Project != project || info.State == sandbox.StateDeleted || info.State == sandbox.StateFailed {
			continue
		}
		u.sandboxes++
		if info.State != sandbox.StatePaused {
			u.memoryMiB += info.MemoryMiB
			u.vcpus += info.VCPUs
		}
	}
	return u, nil
}

// admitSnapshot refuses a snapshot once the caller's project's snapshots
// reach its SnapshotBytes.
func (s *server) admitSnapshot(ctx context.Context) error {
	project := caller(ctx).Project
	q, ok := s.quotas.byProject[project]
	if !ok || q.SnapshotBytes == 0 || s.tenancy == nil {
		return nil
	}
	owners, err := s.tenancy.Owners(ctx, store.KindSnapshot)
	if err != nil {
		return err
	}
	sns, err := s.m.ListSnapshots(ctx)
	if err != nil {
		return err
	}
	var have int64
	for _, sn := range sns {
		if owners[sn.ID].Project == project {
			have += sn.SizeBytes
		}
	}
	if have >= q.SnapshotBytes {
		return quotaExceeded(project, "snapshot_bytes", q.SnapshotBytes, have, 0)
	}
	return nil
}
