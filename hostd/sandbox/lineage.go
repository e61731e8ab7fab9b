package sandbox

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/snapshot"
)

// maxLineageNodes bounds a lineage tree.
const maxLineageNodes = 2000

// LineageNode is a snapshot or a sandbox in a lineage tree: a snapshot's
// children are the snapshots whose disk layers overlay it and the
// sandboxes running on it.
type LineageNode struct {
	Kind string // "snapshot" or "sandbox"
	ID   string
	// State is a sandbox's state, or "snapshot".
	State string
	// SnapshotKind is a snapshot's kind ("snapshot", "fork", …); SandboxID
	// the sandbox it was taken from.
	SnapshotKind string
	SandboxID    string
	CreatedAt    time.Time
	// LastCommand is the sandbox's last command that ended, or, for a
	// snapshot, the last one its sandbox ended before it was taken.
	LastCommand *LastCommand
	Children    []*LineageNode
}

// LastCommand is a command of the flight recorder.
type LastCommand struct {
	ExecID   string
	Argv     []string
	ExitCode *int
	Signal   string
	EndedAt  *time.Time
}

// Lineage is the tree of snapshots and forks that sandbox id belongs to:
// rooted at the oldest snapshot of its chain that someone took (a
// snapshot or a fork's, not a host's base or a template build step), or
// at the sandbox itself when there is none. visible, if set, keeps only
// the nodes the caller may see.
func (m *Manager) Lineage(ctx context.Context, id string, visible func(kind, id string) bool) (*LineageNode, error) {
	info, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if visible == nil {
		visible = func(string, string) bool { return true }
	}
	snaps, err := m.opts.Store.ListSnapshots(ctx)
	if err != nil {
		return nil, err
	}
	boxes, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]store.Snapshot{}
	kids := map[string][]store.Snapshot{}
	for _, sn := range snaps {
		byID[sn.ID] = sn
		kids[sn.ParentID] = append(kids[sn.ParentID], sn)
	}
	info.SnapshotID = m.snapshotOf(ctx, id)
	on := map[string][]Info{}
	for _, b := range boxes {
		b.SnapshotID = m.snapshotOf(ctx, b.ID)
		on[b.SnapshotID] = append(on[b.SnapshotID], b)
	}
	root := ""
	for cur := info.SnapshotID; cur != ""; cur = byID[cur].ParentID {
		sn, ok := byID[cur]
		if !ok || sn.Kind == snapshot.KindBase || sn.Kind == snapshot.KindStep {
			break
		}
		root = cur
	}
	t := lineageTree{m: m, kids: kids, on: on, visible: visible}
	if root == "" {
		return t.sandbox(ctx, info), nil
	}
	return t.snapshot(ctx, byID[root]), nil
}

// lineageTree builds the nodes.
type lineageTree struct {
	m       *Manager
	kids    map[string][]store.Snapshot
	on      map[string][]Info
	visible func(kind, id string) bool
	n       int
}

func (t *lineageTree) snapshot(ctx context.Context, sn store.Snapshot) *LineageNode {
	t.n++
	n := &LineageNode{Kind: "snapshot", ID: sn.ID, State: "snapshot", SnapshotKind: sn.Kind, SandboxID: sn.SandboxID, CreatedAt: sn.CreatedAt,
		LastCommand: t.m.lastCommand(ctx, sn.SandboxID, sn.CreatedAt)}
	for _, c := range t.kids[sn.ID] {
		if t.n < maxLineageNodes && t.visible("snapshot", c.ID) {
			n.Children = append(n.Children, t.snapshot(ctx, c))
		}
	}
	for _, b := range t.on[sn.ID] {
		if t.n < maxLineageNodes && t.visible("sandbox", b.ID) && b.Metadata["agentbox.diff_of"] == "" {
			n.Children = append(n.Children, t.sandbox(ctx, b))
		}
	}
	return n
}

func (t *lineageTree) sandbox(ctx context.Context, b Info) *LineageNode {
	t.n++
	return &LineageNode{Kind: "sandbox", ID: b.ID, State: string(b.State), CreatedAt: b.CreatedAt, LastCommand: t.m.lastCommand(ctx, b.ID, time.Time{})}
}

// lastCommand is the last exec of sandbox id that ended by until (zero:
// now), from its flight recorder; nil without one.
func (m *Manager) lastCommand(ctx context.Context, id string, until time.Time) *LastCommand {
	if m.opts.Recorder == nil || id == "" {
		return nil
	}
	q := store.EventQuery{SandboxID: id, Types: []string{recorder.TypeExec}, Until: until, Limit: 1000}
	var last *LastCommand
	argv := map[string][]string{} // a start's argv, for its end
	for {
		evs, err := m.opts.Recorder.List(ctx, q)
		if err != nil {
			return last
		}
		for _, e := range evs {
			q.After = e.ID
			var d recorder.ExecData
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			if d.Phase == recorder.PhaseStart {
				if len(argv) > 10000 {
					clear(argv)
				}
				argv[d.ExecID] = d.Argv
				continue
			}
			if d.Argv == nil {
				d.Argv = argv[d.ExecID]
			}
			last = &LastCommand{ExecID: d.ExecID, Argv: d.Argv, ExitCode: d.ExitCode, Signal: d.Signal, EndedAt: d.Ended}
		}
		if len(evs) < q.Limit {
			return last
		}
	}
}
