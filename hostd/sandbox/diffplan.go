package sandbox

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
)

// window is a stretch of one sandbox's flight recorder whose writes made a
// side's disk from the common snapshot (Until zero: up to now).
type window struct {
	SandboxID    string
	Since, Until time.Time
}

// diffPlan is how a diff finds its candidates.
type diffPlan struct {
	method, reason string
	a, b           *diffSide
	// since is the common snapshot's time less clockSlack (zero: full).
	since time.Time
	// wa and wb are each side's journal windows since the base.
	wa, wb []window
}

// windows are the journal windows of side s since base: its own segment
// (a sandbox's writes on its snapshot) and the segment of every snapshot
// between it and base, in the sandbox that wrote it.
func windows(s *diffSide, base store.Snapshot) []window {
	var ws []window
	chain := s.chain
	if s.Kind == "sandbox" {
		if len(chain) == 0 {
			return nil
		}
		ws = append(ws, window{SandboxID: s.ID, Since: chain[0].CreatedAt.Add(-clockSlack)})
	}
	for i := 0; i+1 < len(chain) && chain[i].ID != base.ID; i++ {
		ws = append(ws, window{SandboxID: chain[i].SandboxID, Since: chain[i+1].CreatedAt.Add(-clockSlack),
			Until: chain[i].CreatedAt.Add(clockSlack)})
	}
	return ws
}

// planDiff chooses the method: what was asked, else the journal where
// both journals are complete, the walk where not, full without a base.
func (m *Manager) planDiff(ctx context.Context, req DiffRequest, a, b *diffSide, base store.Snapshot, ok bool) (diffPlan, error) {
	p := diffPlan{a: a, b: b}
	guestOnly := a.c != nil && b.c != nil
	if !ok {
		if req.Method == DiffJournal || req.Method == DiffWalk {
			return p, fmt.Errorf("%w: %s and %s (different templates, or a cold boot): ask for method=full to compare every file", ErrNoCommonSnapshot, a.ID, b.ID)
		}
		if !guestOnly {
			return p, fmt.Errorf("%w: %s and %s, and a paused sandbox can be compared only by its journal since a common snapshot", ErrNoCommonSnapshot, a.ID, b.ID)
		}
		p.method, p.reason = DiffFull, "the two sides share no snapshot (different templates or a cold boot): every entry of both trees is compared"
		return p, nil
	}
	p.since = base.CreatedAt.Add(-clockSlack)
	p.wa, p.wb = windows(a, base), windows(b, base)
	switch req.Method {
	case DiffFull:
		if !guestOnly {
			return p, fmt.Errorf("%w: a full diff reads both guests; a paused sandbox has only its journal (resume it, or diff a snapshot)", ErrInvalid)
		}
		p.method, p.reason = DiffFull, "asked for: every entry of both trees"
		return p, nil
	case DiffWalk:
		if !guestOnly {
			return p, fmt.Errorf("%w: a walk reads both guests; a paused sandbox has only its journal", ErrInvalid)
		}
		p.method, p.reason = DiffWalk, "asked for: the entries changed since "+base.ID+" by ctime/mtime, compared by digest"
		return p, nil
	}
	why, complete, err := m.journalComplete(ctx, append(append([]window{}, p.wa...), p.wb...))
	if err != nil {
		return p, err
	}
	switch {
	case complete:
		p.method, p.reason = DiffJournal, "the file events of both sides since "+base.ID+" (the guests' fanotify journal: writes, chmod, chown, touch), compared by digest"
	case req.Method == DiffJournal || !guestOnly:
		if req.Method == DiffJournal || a.c == nil || b.c == nil {
			p.method, p.reason = DiffJournal, "the journal, though incomplete: "+why
			return p, nil
		}
	default:
		p.method, p.reason = DiffWalk, "the journal is incomplete ("+why+"): the entries changed since "+base.ID+" by ctime/mtime, compared by digest"
	}
	return p, nil
}

// journalComplete reports whether the recorder kept every file event of
// the windows: it keeps a log, and no window lost guest events.
func (m *Manager) journalComplete(ctx context.Context, ws []window) (string, bool, error) {
	if m.opts.Recorder == nil {
		return "this hostd keeps no flight recorder", false, nil
	}
	for _, w := range ws {
		q := store.EventQuery{SandboxID: w.SandboxID, Types: []string{recorder.TypeRecorder}, Since: w.Since, Until: w.Until, Limit: 1000}
		evs, err := m.opts.Recorder.List(ctx, q)
		if err != nil {
			return "", false, err
		}
		for _, e := range evs {
			var d recorder.RecorderData
			if json.Unmarshal(e.Data, &d) == nil && (d.Lost > 0 || d.WatchError != "") {
				why := fmt.Sprintf("%s lost %d file events", w.SandboxID, d.Lost)
				if d.WatchError != "" {
					why = w.SandboxID + ": " + d.WatchError
				}
				return why, false, nil
			}
		}
	}
	return "", true, nil
}

// fileEvents calls fn with every file event of the windows, page by page.
func (m *Manager) fileEvents(ctx context.Context, ws []window, fn func(recorder.FileData)) error {
	for _, w := range ws {
		q := store.EventQuery{SandboxID: w.SandboxID, Types: []string{recorder.TypeFile}, Since: w.Since, Until: w.Until, Limit: 1000}
		for {
			evs, err := m.opts.Recorder.List(ctx, q)
			if err != nil {
				return err
			}
			for _, e := range evs {
				var d recorder.FileData
				if json.Unmarshal(e.Data, &d) == nil {
					fn(d)
				}
				q.After = e.ID
			}
			if len(evs) < q.Limit {
				break
			}
		}
	}
	return nil
}

// inDiff reports whether p is under root and not excluded.
func inDiff(p, root string, excludes []string) bool {
	if !within(p, root) {
		return false
	}
	for _, e := range excludes {
		if within(p, e) {
			return false
		}
	}
	return true
}

func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// smallest keeps the n smallest distinct strings it is offered, in bounded
// memory: a max-heap of n and a set of its members.
type smallest struct {
	n   int
	h   strHeap
	set map[string]bool
}

func newSmallest(n int) *smallest { return &smallest{n: n, set: map[string]bool{}} }

func (s *smallest) add(p string) {
	if s.set[p] {
		return
	}
	if len(s.h) < s.n {
		s.set[p] = true
		heap.Push(&s.h, p)
		return
	}
	if p >= s.h[0] {
		return
	}
	delete(s.set, s.h[0])
	s.h[0] = p
	s.set[p] = true
	heap.Fix(&s.h, 0)
}

// sorted returns the members in order.
func (s *smallest) sorted() []string {
	out := make([]string, 0, len(s.h))
	for len(s.h) > 0 {
		out = append(out, heap.Pop(&s.h).(string))
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

type strHeap []string

func (h strHeap) Len() int           { return len(h) }
func (h strHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h strHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *strHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *strHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// journalCandidates are the limit+1 first paths after cursor that a file
// event of either side names, under the request's path.
func (m *Manager) journalCandidates(ctx context.Context, req DiffRequest, p *diffPlan) ([]string, error) {
	keep := newSmallest(req.Limit + 1)
	offer := func(x string) {
		if x != "" && x > req.Cursor && inDiff(x, req.Path, req.Excludes) {
			keep.add(x)
		}
	}
	fn := func(d recorder.FileData) { offer(d.Path); offer(d.OldPath) }
	if err := m.fileEvents(ctx, p.wa, fn); err != nil {
		return nil, err
	}
	if err := m.fileEvents(ctx, p.wb, fn); err != nil {
		return nil, err
	}
	return keep.sorted(), nil
}

// journalRecs are the records of paths as side s's journal last saw them
// (a paused side): deleted is missing, else a file of the size and digest
// the event carried.
func (m *Manager) journalRecs(ctx context.Context, ws []window, paths []string) (map[string]fileRec, error) {
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
	out := map[string]fileRec{}
	err := m.fileEvents(ctx, ws, func(d recorder.FileData) {
		if want[d.OldPath] && d.Op == "renamed" {
			out[d.OldPath] = fileRec{Path: d.OldPath, Missing: true, Journal: true}
		}
		if !want[d.Path] {
			return
		}
		r := fileRec{Path: d.Path, Type: "f", Size: d.Size, SHA256: d.SHA256, Journal: true}
		if d.Dir {
			r.Type, r.Size = "d", 0
		}
		if d.Op == "deleted" {
			r = fileRec{Path: d.Path, Missing: true, Journal: true}
		}
		out[d.Path] = r
	})
	for _, p := range paths {
		if _, ok := out[p]; !ok {
			out[p] = fileRec{Path: p, Journal: true} // untouched since the base: as it was there
		}
	}
	return out, err
}

// touched are the paths of paths that a file event of the windows names
// strictly after since (without the windows' clock slack).
func (m *Manager) touched(ctx context.Context, ws []window, paths []string, since time.Time) (map[string]bool, error) {
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
	strict := make([]window, len(ws))
	for i, w := range ws {
		strict[i] = w
		if w.Since.Before(since) {
			strict[i].Since = since
		}
	}
	out := map[string]bool{}
	err := m.fileEvents(ctx, strict, func(d recorder.FileData) {
		for _, p := range []string{d.Path, d.OldPath} {
			if want[p] {
				out[p] = true
			}
		}
	})
	return out, err
}
