package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
)

// CompareManager is what the diff, lineage and replay handlers need of the
// sandbox manager; a Manager without it answers them with 501.
type CompareManager interface {
	Diff(ctx context.Context, req sandbox.DiffRequest) (sandbox.DiffResult, error)
	Lineage(ctx context.Context, id string, visible func(kind, id string) bool) (*sandbox.LineageNode, error)
	Replay(ctx context.Context, req sandbox.ReplayRequest, progress func(sandbox.ReplayEvent)) (sandbox.ReplayResult, error)
}

var errNoCompare = &apiError{status: http.StatusNotImplemented, code: CodeNotImplemented, msg: "this hostd cannot compare sandboxes"}

func (s *server) compare() (CompareManager, error) {
	c, ok := s.m.(CompareManager)
	if !ok {
		return nil, errNoCompare
	}
	return c, nil
}

func (s *server) DiffSandbox(w http.ResponseWriter, r *http.Request, id SandboxID, p DiffSandboxParams) {
	q := DiffSnapshotParams{Against: p.Against, Path: p.Path, Exclude: p.Exclude, Patch: p.Patch, MaxPatchBytes: p.MaxPatchBytes,
		Cursor: p.Cursor, Limit: p.Limit, Events: p.Events}
	if p.Method != nil {
		m := DiffSnapshotParamsMethod(*p.Method)
		q.Method = &m
	}
	s.diff(w, r, id, q)
}

func (s *server) DiffSnapshot(w http.ResponseWriter, r *http.Request, id string, p DiffSnapshotParams) {
	s.diff(w, r, id, p)
}

func (s *server) diff(w http.ResponseWriter, r *http.Request, id string, p DiffSnapshotParams) {
	c, err := s.compare()
	if err == nil && (p.Against == nil || *p.Against == "") {
		err = badRequest(CodeInvalidParam, "against is required: the sandbox or snapshot to compare with")
	}
	if err == nil {
		err = s.reachSide(r.Context(), *p.Against)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	req := sandbox.DiffRequest{ID: id, Against: *p.Against, Patch: p.Patch != nil && *p.Patch, Events: p.Events != nil && *p.Events}
	if p.Path != nil {
		req.Path = *p.Path
	}
	if p.Exclude != nil {
		req.Excludes = []string{}
		for _, e := range *p.Exclude {
			if e != "" {
				req.Excludes = append(req.Excludes, e)
			}
		}
	}
	if p.Method != nil {
		req.Method = string(*p.Method)
	}
	if p.MaxPatchBytes != nil {
		req.PatchCap = *p.MaxPatchBytes
	}
	if p.Cursor != nil {
		req.Cursor = *p.Cursor
	}
	if p.Limit != nil {
		req.Limit = *p.Limit
	}
	res, err := c.Diff(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toDiff(res))
}

// reachSide answers 404 for an against side of another project.
func (s *server) reachSide(ctx context.Context, id string) error {
	kind := store.KindSandbox
	if strings.HasPrefix(id, "sn-") {
		kind = store.KindSnapshot
	}
	return s.reach(ctx, kind, id, false)
}

func toDiff(r sandbox.DiffResult) Diff {
	d := Diff{New: toDiffSide(r.A), Old: toDiffSide(r.B), BaseSnapshot: r.Base, Method: DiffMethod(r.Method), Reason: r.Reason,
		Path: r.Path, Excludes: r.Excludes, Entries: make([]DiffEntry, 0, len(r.Entries)), NextCursor: r.NextCursor}
	if d.Excludes == nil {
		d.Excludes = []string{}
	}
	for _, e := range r.Entries {
		de := DiffEntry{Path: e.Path, OldPath: e.OldPath, Status: DiffEntryStatus(e.Status), Kind: DiffEntryKind(e.Kind),
			New: toDiffStat(e.A), Old: toDiffStat(e.B), Binary: e.Binary, Patch: e.Patch,
			PatchOmitted: DiffEntryPatchOmitted(e.PatchOmitted), Additions: e.Additions, Deletions: e.Deletions}
		if !utf8.ValidString(e.Path) {
			de.Path, de.PathB64 = strings.ToValidUTF8(e.Path, "\uFFFD"), []byte(e.Path)
		}
		de.OldPath = strings.ToValidUTF8(de.OldPath, "\uFFFD")
		for _, c := range e.Changes {
			de.Changes = append(de.Changes, DiffEntryChanges(c))
		}
		d.Entries = append(d.Entries, de)
	}
	if ev := r.Events; ev != nil {
		d.Events = &DiffEvents{Common: auditEvents(ev.Common), New: auditEvents(ev.A), Old: auditEvents(ev.B), Truncated: ev.Truncated}
	}
	return d
}

func auditEvents(evs []store.Event) []AuditEvent {
	out := make([]AuditEvent, 0, len(evs))
	for _, e := range evs {
		out = append(out, toAuditEvent(e))
	}
	return out
}

func toDiffSide(s sandbox.DiffSide) DiffSide {
	return DiffSide{Kind: DiffSideKind(s.Kind), ID: s.ID, State: s.State, Source: DiffSideSource(s.Source)}
}

func toDiffStat(st *sandbox.DiffStat) *DiffStat {
	if st == nil {
		return nil
	}
	out := &DiffStat{Type: DiffStatType(st.Type), Size: st.Size, Mode: int(st.Mode), UID: st.UID, GID: st.GID, Sha256: st.SHA256,
		LinkTarget: strings.ToValidUTF8(st.Link, "\uFFFD"), Journal: st.Journal}
	if !st.MTime.IsZero() {
		t := st.MTime
		out.Mtime = &t
	}
	return out
}

func (s *server) GetSandboxLineage(w http.ResponseWriter, r *http.Request, id SandboxID) {
	c, err := s.compare()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	visible := func(kind, id string) bool {
		k := store.KindSandbox
		if kind == "snapshot" {
			k = store.KindSnapshot
		}
		return s.reach(ctx, k, id, false) == nil
	}
	root, err := c.Lineage(ctx, id, visible)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Lineage{SandboxID: id, Root: toLineageNode(root)})
}

func toLineageNode(n *sandbox.LineageNode) LineageNode {
	out := LineageNode{Kind: LineageNodeKind(n.Kind), ID: n.ID, State: n.State, SnapshotKind: n.SnapshotKind, SandboxID: n.SandboxID,
		CreatedAt: n.CreatedAt, Children: make([]LineageNode, 0, len(n.Children))}
	if lc := n.LastCommand; lc != nil {
		out.LastCommand = &LineageCommand{ExecID: lc.ExecID, Argv: lc.Argv, ExitCode: lc.ExitCode, Signal: lc.Signal, EndedAt: lc.EndedAt}
		if out.LastCommand.Argv == nil {
			out.LastCommand.Argv = []string{}
		}
	}
	for _, c := range n.Children {
		out.Children = append(out.Children, toLineageNode(c))
	}
	return out
}

func (s *server) ReplaySnapshot(w http.ResponseWriter, r *http.Request, id string, p ReplaySnapshotParams) {
	c, err := s.compare()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req ReplayRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	rr := sandbox.ReplayRequest{SnapshotID: id, Cmd: req.Cmd, N: req.N, Cwd: req.Cwd, TimeoutS: req.TimeoutS, Keep: req.Keep, Caller: KeyName(r.Context())}
	if req.Env != nil {
		rr.Env = *req.Env
	}
	release, err := s.admitSnapshotRestores(r.Context(), id, req.N)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	stream := (p.Stream != nil && *p.Stream) || strings.Contains(r.Header.Get("Accept"), "application/x-ndjson")
	if !stream {
		res, err := c.Replay(r.Context(), rr, nil)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, toReplayResult(res))
		return
	}
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	started := false
	line := func(ev ReplayEvent) {
		if !started {
			startNDJSON(w, rc)
			started = true
		}
		_ = enc.Encode(ev)
		_ = rc.Flush()
	}
	res, err := c.Replay(r.Context(), rr, func(ev sandbox.ReplayEvent) {
		run := toReplayRun(ev.Run)
		line(ReplayEvent{Type: ReplayEventType(ev.Type), Run: &run})
	})
	if err != nil {
		if !started {
			s.writeError(w, r, err)
			return
		}
		_ = enc.Encode(map[string]any{"type": "error", "error": map[string]string{"code": CodeInternal, "message": err.Error()}})
		return
	}
	out := toReplayResult(res)
	line(ReplayEvent{Type: ReplayEventTypeResult, Result: &out})
}

// admitSnapshotRestores admits n sandboxes restored from snapshot id
// against the caller's project's quota (as a create from it).
func (s *server) admitSnapshotRestores(ctx context.Context, id string, n int) (func(), error) {
	sn, err := s.m.GetSnapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.admit(ctx, n, sn.VCPUs, sn.MemoryMiB)
}

func toReplayRun(r sandbox.ReplayRun) ReplayRun {
	return ReplayRun{Index: r.Index, SandboxID: r.SandboxID, ExitCode: r.ExitCode, Signal: r.Signal,
		Stdout: strings.ToValidUTF8(string(r.Stdout), "\uFFFD"), Stderr: strings.ToValidUTF8(string(r.Stderr), "\uFFFD"),
		Truncated: r.Truncated, DurationMs: r.DurationMS, Error: r.Error, Group: r.Group}
}

func toReplayResult(r sandbox.ReplayResult) ReplayResult {
	out := ReplayResult{Groups: r.Groups, Differ: r.Differ, Runs: make([]ReplayRun, 0, len(r.Runs))}
	for _, run := range r.Runs {
		out.Runs = append(out.Runs, toReplayRun(run))
	}
	return out
}
