package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/hostd/store"
)

// Diff methods: how the paths that may differ are found (DiffResult.Method).
const (
	// DiffJournal takes the paths from the flight recorder's file events
	// of each side since their common snapshot (the guest's fanotify
	// journal, which sees writes, chmod, chown and touch): it does not
	// scale with the tree, but misses what a guest older than those
	// events did, or did with the watcher off.
	DiffJournal = "journal"
	// DiffWalk walks both guests' trees and keeps the entries whose ctime
	// or mtime is after the common snapshot (and the children of such
	// directories); every candidate is then compared by digest.
	DiffWalk = "walk"
	// DiffFull compares every entry of both trees: the sides share no
	// snapshot (different templates).
	DiffFull = "full"
	// DiffAuto is the journal where both sides' journals are complete,
	// else the walk; full where the sides share no snapshot.
	DiffAuto = "auto"
)

// DefaultDiffExcludes are left out of a diff unless the caller names its own.
var DefaultDiffExcludes = []string{"/proc", "/sys", "/dev", "/run", "/tmp"}

// Bounds of a diff.
const (
	DefaultDiffLimit = 1000
	MaxDiffLimit     = 10000
	DefaultPatchCap  = 256 << 10
	MaxPatchCap      = 4 << 20
	// maxTreeEntries bounds the entries listed under one removed directory.
	maxTreeEntries = 10000
	// clockSlack widens the time windows: a guest's clock and the host's
	// can differ by this much; an entry inside it is a candidate more,
	// which the digest compare drops.
	clockSlack = 5 * time.Second
)

// ErrNoCommonSnapshot refuses a journal or walk diff of sides that share
// no snapshot.
var ErrNoCommonSnapshot = errors.New("sandbox: diff: the two sides share no snapshot")

// DiffRequest is one page of a diff: what ID has that Against has not.
type DiffRequest struct {
	// ID and Against are sandbox ids ("sb-…") or snapshot ids ("sn-…").
	ID, Against string
	// Path limits the diff to a subtree (default "/").
	Path string
	// Excludes are left out (nil: DefaultDiffExcludes; empty: none).
	Excludes []string
	// Method is DiffAuto (default), DiffJournal, DiffWalk or DiffFull.
	Method string
	// Patch asks for unified diffs of text files of up to PatchCap bytes.
	Patch    bool
	PatchCap int64
	// Cursor continues a page (DiffResult.NextCursor); Limit caps the
	// entries of one page (the entries of a removed tree may add some).
	Cursor string
	Limit  int
	// Events adds the two flight-recorder logs since the common snapshot.
	Events bool
}

// DiffSide names one side of a diff.
type DiffSide struct {
	Kind  string // "sandbox" or "snapshot"
	ID    string
	State string
	// Source is "guest" (read from its running guest, or a transient
	// restore of a snapshot) or "journal" (a paused sandbox: its flight
	// recorder only, no mode, owner or contents).
	Source string
}

// DiffResult is a page of a diff.
type DiffResult struct {
	A, B DiffSide // A is ID (new), B is Against (old)
	// Base is the newest snapshot both sides descend from ("" for none).
	Base string
	// Method is how the candidates were found, Reason why that one.
	Method, Reason string
	Path           string
	Excludes       []string
	Entries        []DiffEntry
	// NextCursor continues the diff ("" at its end).
	NextCursor string
	Events     *EventsDiff
}

// Diff statuses.
const (
	DiffAdded    = "added"
	DiffRemoved  = "removed"
	DiffModified = "modified"
	DiffRenamed  = "renamed"
)

// DiffEntry is one path that differs.
type DiffEntry struct {
	Path    string
	OldPath string // renamed: where it was in B
	Status  string
	// Kind is "file", "dir", "symlink" or "other" (of A's side, else B's).
	Kind string
	// A and B are the entry on each side (nil where absent).
	A, B *DiffStat
	// Changes names what differs: "content", "mode", "owner", "type",
	// "target".
	Changes []string
	Binary  bool
	// Patch is the unified diff (with Patch asked, text under the cap);
	// PatchOmitted says why there is none ("binary", "too_large",
	// "not_asked", "no_content").
	Patch        string
	PatchOmitted string
	Additions    int
	Deletions    int
}

// DiffStat is an entry on one side.
type DiffStat struct {
	Type   string // "file", "dir", "symlink", "other"
	Size   int64
	Mode   uint32 // permission bits (with setuid, setgid, sticky)
	UID    int
	GID    int
	SHA256 string
	Link   string
	MTime  time.Time
	// Journal marks a stat known only from the flight recorder.
	Journal bool
}

// diffSide is a resolved side: its guest (nil: journal only), the chain
// of snapshots its disk descends from (nearest first), and cleanup.
type diffSide struct {
	DiffSide
	c *agentclient.Client
	// chain is the side's snapshots, nearest first; a snapshot side's
	// chain starts with itself.
	chain []store.Snapshot
	// close ends what the side made (a snapshot's transient sandbox).
	close func()
}

// Diff compares two sandboxes, a sandbox and a snapshot, or two snapshots:
// one page of what req.ID has that req.Against has not.
func (m *Manager) Diff(ctx context.Context, req DiffRequest) (DiffResult, error) {
	if err := normalizeDiff(&req); err != nil {
		return DiffResult{}, err
	}
	a, err := m.diffSide(ctx, req.ID)
	if err != nil {
		return DiffResult{}, err
	}
	defer a.close()
	b, err := m.diffSide(ctx, req.Against)
	if err != nil {
		return DiffResult{}, err
	}
	defer b.close()
	res := DiffResult{A: a.DiffSide, B: b.DiffSide, Path: req.Path, Excludes: req.Excludes}
	base, ok := commonBase(a.chain, b.chain)
	if ok {
		res.Base = base.ID
	}
	plan, err := m.planDiff(ctx, req, a, b, base, ok)
	if err != nil {
		return DiffResult{}, err
	}
	if err := m.runDiff(ctx, req, &plan, &res); err != nil {
		return DiffResult{}, err
	}
	res.Method, res.Reason = plan.method, plan.reason // a walk may have turned full
	if req.Events {
		ev, err := m.eventsDiff(ctx, plan, req.Limit)
		if err != nil {
			return DiffResult{}, err
		}
		res.Events = &ev
	}
	return res, nil
}

func normalizeDiff(req *DiffRequest) error {
	if req.Path == "" {
		req.Path = "/"
	}
	if err := CheckPath(req.Path); err != nil {
		return err
	}
	req.Path = path.Clean(req.Path)
	if req.Excludes == nil {
		req.Excludes = DefaultDiffExcludes
	}
	for i, e := range req.Excludes {
		if err := CheckPath(e); err != nil {
			return err
		}
		req.Excludes[i] = path.Clean(e)
	}
	switch req.Method {
	case "":
		req.Method = DiffAuto
	case DiffAuto, DiffJournal, DiffWalk, DiffFull:
	default:
		return fmt.Errorf("%w: method %q is not auto, journal, walk or full", ErrInvalid, req.Method)
	}
	if req.Limit == 0 {
		req.Limit = DefaultDiffLimit
	}
	if req.Limit < 1 || req.Limit > MaxDiffLimit {
		return fmt.Errorf("%w: limit must be 1..%d", ErrInvalid, MaxDiffLimit)
	}
	if req.PatchCap == 0 {
		req.PatchCap = DefaultPatchCap
	}
	if req.PatchCap < 1 || req.PatchCap > MaxPatchCap {
		return fmt.Errorf("%w: max_patch_bytes must be 1..%d", ErrInvalid, MaxPatchCap)
	}
	if req.ID == req.Against {
		return fmt.Errorf("%w: a diff needs two different sides", ErrInvalid)
	}
	return nil
}

// diffSide resolves id: a running sandbox is read through its agent, a
// paused one from its journal (it is not resumed), a snapshot through a
// transient sandbox restored from it (the snapshot itself is immutable),
// deleted at the end of the diff.
func (m *Manager) diffSide(ctx context.Context, id string) (*diffSide, error) {
	s := &diffSide{close: func() {}}
	if strings.HasPrefix(id, "sn-") {
		sn, err := m.opts.Store.GetSnapshot(ctx, id)
		if err != nil {
			return nil, snapshotNotFound(err, id)
		}
		s.DiffSide = DiffSide{Kind: "snapshot", ID: id, State: "snapshot", Source: "guest"}
		if s.chain, err = m.snapChain(ctx, sn); err != nil {
			return nil, err
		}
		info, err := m.create(ctx, CreateOptions{Snapshot: id, Metadata: map[string]string{"agentbox.diff_of": id}})
		if err != nil {
			if info.ID != "" {
				_ = m.Delete(context.WithoutCancel(ctx), info.ID)
			}
			return nil, fmt.Errorf("sandbox: diff: restore snapshot %s: %w", id, err)
		}
		s.close = func() { _ = m.Delete(context.WithoutCancel(ctx), info.ID) }
		if s.c, err = m.agentOf(ctx, info.ID); err != nil {
			s.close()
			return nil, err
		}
		return s, nil
	}
	info, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	s.DiffSide = DiffSide{Kind: "sandbox", ID: id, State: string(info.State), Source: "guest"}
	info.SnapshotID = m.snapshotOf(ctx, id)
	if info.SnapshotID != "" {
		sn, err := m.opts.Store.GetSnapshot(ctx, info.SnapshotID)
		if err != nil {
			return nil, snapshotNotFound(err, info.SnapshotID)
		}
		if s.chain, err = m.snapChain(ctx, sn); err != nil {
			return nil, err
		}
	}
	switch info.State {
	case StatePaused:
		s.Source = "journal"
	case StateRunning:
		if s.c, err = m.agentOf(ctx, id); err != nil {
			return nil, err
		}
		if b := m.reg.live(id); b != nil {
			m.rec.drainGuest(ctx, b) // the journal up to now
		}
	default:
		return nil, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, id, info.State)
	}
	return s, nil
}

// snapshotOf is the snapshot whose layer sandbox id's disk overlays now
// ("" for none, or no record).
func (m *Manager) snapshotOf(ctx context.Context, id string) string {
	v, err := m.opts.Store.GetSandboxVM(ctx, id)
	if err != nil {
		return ""
	}
	return v.SnapshotID
}

// agentOf is the agent of running sandbox id.
func (m *Manager) agentOf(ctx context.Context, id string) (*agentclient.Client, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return nil, err
	}
	c, err := b.client(ctx)
	if err != nil {
		return nil, b.streamErr(err)
	}
	return c, nil
}

// snapChain is sn and its ancestors, nearest first (bounded).
func (m *Manager) snapChain(ctx context.Context, sn store.Snapshot) ([]store.Snapshot, error) {
	chain := []store.Snapshot{sn}
	for len(chain) < 256 && sn.ParentID != "" {
		var err error
		if sn, err = m.opts.Store.GetSnapshot(ctx, sn.ParentID); err != nil {
			return nil, snapshotNotFound(err, sn.ParentID)
		}
		chain = append(chain, sn)
	}
	return chain, nil
}

// commonBase is the nearest snapshot of a's chain that b's chain holds.
func commonBase(a, b []store.Snapshot) (store.Snapshot, bool) {
	for _, x := range a {
		if slices.ContainsFunc(b, func(y store.Snapshot) bool { return y.ID == x.ID }) {
			return x, true
		}
	}
	return store.Snapshot{}, false
}
