package sandbox

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/internal/fault"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
)

// Fork snapshots sandbox id and starts count copy-on-write copies of it
// (snapshot.Fork). Each fork gets its own disk overlay, hostname,
// machine-id, entropy and clock; unchanged memory pages stay shared with
// the snapshot. Where the backend stages restores (vmm.Stager), the first
// copies start while the snapshot is made. The copies are admitted as
// creates are, against the host's and the caller's maximums; the fork's
// snapshot is held from the moment it exists until every copy is recorded
// on it, so a delete of the parent meanwhile does not take it.
func (m *Manager) Fork(ctx context.Context, id string, fo ForkOptions) ([]Info, error) {
	count := fo.Count
	if count < 1 || count > 64 {
		return nil, fmt.Errorf("%w: count must be 1..64, got %d", ErrInvalid, count)
	}
	defer m.opts.Metrics.Since(snapshot.KindFork, time.Now())
	parent, err := m.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, notFound(err, id)
	}
	mnts, err := m.mnts.saved(parent.Dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: fork %s: mounts: %w", id, err)
	}
	meta := maps.Clone(parent.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	meta["forked_from"] = id
	opts := CreateOptions{Env: parent.Env, Metadata: meta, TimeoutS: parent.TimeoutS, Network: m.nets.inherited(ctx, id),
		Limits: m.limits.of(ctx, id), Mounts: mnts, Caller: fo.Caller}
	out := make([]Info, count)
	var held string // the fork's snapshot, held by m.snapshot
	defer func() {
		if held != "" {
			m.snaps.Release(held)
		}
	}()
	_, isStager := m.opts.Driver.(vmm.Stager)
	_, sn, err := snapshot.Fork(ctx, snapshot.ForkPlan{Count: count, Parallel: m.opts.ForkParallel, Staged: isStager,
		Capture: func(ctx context.Context, planned func(snapshot.Record)) (snapshot.Record, error) {
			sn, err := m.snapshot(ctx, id, SnapshotOptions{Kind: snapshot.KindFork}, planned)
			if err == nil {
				held = sn.ID
				fault.Point("fork:snapshotted")
			}
			return snapshot.Record{ID: sn.ID}, err
		},
		Start: func(ctx context.Context, i int, from snapshot.From) (string, error) {
			o := opts
			if from.Gate != nil {
				o.staged = from.Gate
			} else {
				o.Snapshot = from.Snapshot.ID
			}
			var err error
			out[i], err = m.create(ctx, o)
			return out[i].ID, err
		},
		Remove: func(ctx context.Context, id string) { _ = m.Delete(ctx, id) },
	})
	if err != nil {
		return nil, err
	}
	for _, c := range out {
		m.rec.lifecycle(ctx, c.ID, recorder.LifecycleData{Action: recorder.ActionFork, SourceID: id, SnapshotID: sn.ID})
	}
	return out, nil
}
