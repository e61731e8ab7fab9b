package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/snapshot"
)

// Service is what hostd's API serves, by concern: the manager's lifecycle
// (create, delete, snapshots, forks, pause, limits), its exec sessions, its
// files and its templates. Each part is its own type; Service only puts them
// side by side so that one value satisfies the API's interface.
type Service struct {
	*Manager
	*Execs
	*Files
	*Templates
	*Snapshots
}

// Snapshots serves the snapshots' API: describe, list, delete (capture,
// restore and fork are the manager's).
type Snapshots struct {
	snaps *snapshot.Engine
}

// GetSnapshot describes a snapshot and its users.
func (s *Snapshots) GetSnapshot(ctx context.Context, id string) (SnapshotInfo, error) {
	info, err := s.snaps.Get(ctx, id)
	return info, snapshotNotFound(err, id)
}

// ListSnapshots describes every snapshot.
func (s *Snapshots) ListSnapshots(ctx context.Context) ([]SnapshotInfo, error) {
	return s.snaps.List(ctx)
}

// DeleteSnapshot removes a snapshot that nothing refers to. A snapshot
// that a sandbox, another snapshot or a template still uses is refused with
// ErrInUse.
func (s *Snapshots) DeleteSnapshot(ctx context.Context, id string) error {
	return snapshotNotFound(s.snaps.Delete(ctx, id), id)
}

// Service returns m with its exec and files services.
func (m *Manager) Service() Service {
	return Service{Manager: m,
		Execs:     &Execs{boxes: m, rec: &m.rec, timeouts: m.timeouts, metrics: m.opts.Metrics},
		Files:     &Files{boxes: m, rec: &m.rec},
		Templates: &Templates{snaps: m.snaps, store: m.opts.Store, pools: &m.pools, warm: &m.warm, export: m.templateExport()},
		Snapshots: &Snapshots{snaps: m.snaps}}
}
