package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"
	"golang.org/x/sync/errgroup"
)

// runDiff fills res with one page of entries: the candidates by the plan's
// method, both sides' records of them, compared.
func (m *Manager) runDiff(ctx context.Context, req DiffRequest, p *diffPlan, res *DiffResult) error {
	var (
		paths  []string
		ra, rb map[string]fileRec
		next   string // where the next page starts ("" at the end)
		err    error
	)
	if p.method == DiffJournal {
		paths, err = m.journalCandidates(ctx, req, p)
		if err != nil {
			return err
		}
		if len(paths) > req.Limit {
			paths = paths[:req.Limit]
			next = paths[len(paths)-1]
		}
		g, gctx := errgroup.WithContext(ctx) // both guests' stats at once
		g.Go(func() (err error) { ra, err = m.sideRecs(gctx, p.a, p.wa, paths); return err })
		g.Go(func() (err error) { rb, err = m.sideRecs(gctx, p.b, p.wb, paths); return err })
		if err = g.Wait(); err != nil {
			return err
		}
		if paths, err = m.dropUntouched(ctx, p, paths, ra, rb); err != nil {
			return err
		}
	} else if paths, ra, rb, next, err = walkPage(ctx, req, p); err != nil {
		return err
	}
	entries := make([]DiffEntry, 0, len(paths))
	for _, x := range paths {
		if e, ok := compare(x, ra[x], rb[x]); ok {
			entries = append(entries, e)
		}
	}
	if p.method == DiffWalk {
		if entries, err = expandRemoved(ctx, req, p, entries); err != nil {
			return err
		}
	}
	entries = renames(entries)
	if err := m.patches(ctx, req, p, entries); err != nil {
		return err
	}
	res.Entries, res.NextCursor = entries, next
	return nil
}

// dropUntouched leaves out the paths that a journal-only side did not
// touch (so has as the base had them) and the other side did not touch
// after the base either (a candidate only by the clock slack).
func (m *Manager) dropUntouched(ctx context.Context, p *diffPlan, paths []string, ra, rb map[string]fileRec) ([]string, error) {
	if p.a.c != nil && p.b.c != nil {
		return paths, nil
	}
	base := p.since.Add(clockSlack)
	ta, err := m.touched(ctx, p.wa, paths, base)
	if err != nil {
		return nil, err
	}
	tb, err := m.touched(ctx, p.wb, paths, base)
	if err != nil {
		return nil, err
	}
	out := paths[:0]
	for _, x := range paths {
		if (unknown(ra[x]) && !tb[x]) || (unknown(rb[x]) && !ta[x]) {
			continue
		}
		out = append(out, x)
	}
	return out, nil
}

// unknown is a journal record of a path its side did not touch.
func unknown(r fileRec) bool { return r.Journal && r.Type == "" && !r.Missing }

// sideRecs are side s's records of paths: from its guest, or its journal.
func (m *Manager) sideRecs(ctx context.Context, s *diffSide, ws []window, paths []string) (map[string]fileRec, error) {
	if s.c == nil {
		return m.journalRecs(ctx, ws, paths)
	}
	out := make(map[string]fileRec, len(paths))
	err := guestStat(ctx, s.c, paths, func(r fileRec) { out[r.Path] = r })
	return out, err
}

// Bounds of the directories a walk lists on both sides: past them, the
// page compares every entry instead (method full).
const (
	maxListDirs  = 4096
	maxListBytes = 1 << 20
)

// changedDirs are the directories changed on either side since the plan's
// base, whose children both sides list (so that a removal shows); ok is
// false past the bounds.
func changedDirs(ctx context.Context, base walkReq, p *diffPlan) (dirs []string, ok bool, err error) {
	seen, size := map[string]bool{}, 0
	for _, s := range []*diffSide{p.a, p.b} {
		q := base
		q.DirsOnly, q.Limit = true, maxListDirs
		more, _, err := guestWalk(ctx, s.c, q, func(r fileRec) {
			if !seen[r.Path] {
				seen[r.Path], size = true, size+len(r.Path)
				dirs = append(dirs, r.Path)
			}
		})
		if err != nil {
			return nil, false, err
		}
		if more || len(dirs) > maxListDirs || size > maxListBytes {
			return nil, false, nil
		}
	}
	return dirs, true, nil
}

// walkPage walks both guests for the page after req.Cursor: with a
// since, first the directories changed on either side (whose children
// both sides then list, so that a removal shows), then the entries;
// the page ends where the first side that stopped at its limit ended
// (next: "" at the tree's end).
func walkPage(ctx context.Context, req DiffRequest, p *diffPlan) ([]string, map[string]fileRec, map[string]fileRec, string, error) {
	base := walkReq{Root: req.Path, Excludes: req.Excludes}
	if p.method == DiffWalk {
		base.Since = p.since
	}
	if !base.Since.IsZero() {
		dirs, ok, err := changedDirs(ctx, base, p)
		if err != nil {
			return nil, nil, nil, "", err
		}
		if !ok {
			base.Since = time.Time{}
			p.method = DiffFull
			p.reason = fmt.Sprintf("more than %d directories changed since the base: every entry of both trees is compared", maxListDirs)
		}
		base.Lists = dirs
	}
	q := base
	q.After, q.Limit = req.Cursor, req.Limit
	recs := [2]map[string]fileRec{{}, {}}
	var (
		mores [2]bool
		nexts [2]string
	)
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range []*diffSide{p.a, p.b} {
		g.Go(func() error {
			var err error
			mores[i], nexts[i], err = guestWalk(gctx, s.c, q, func(r fileRec) { recs[i][r.Path] = r })
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, nil, "", err
	}
	stop, more := "", false
	for i := range 2 {
		if mores[i] && (!more || nexts[i] < stop) {
			stop, more = nexts[i], true
		}
	}
	var paths []string
	for i := range 2 {
		for x := range recs[i] {
			if !more || x <= stop {
				paths = append(paths, x)
			}
		}
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	// A path one side listed and the other did not (unchanged there).
	for i, s := range []*diffSide{p.a, p.b} {
		var missing []string
		for _, x := range paths {
			if _, ok := recs[i][x]; !ok {
				missing = append(missing, x)
			}
		}
		if err := guestStat(ctx, s.c, missing, func(r fileRec) { recs[i][r.Path] = r }); err != nil {
			return nil, nil, nil, "", err
		}
	}
	return paths, recs[0], recs[1], stop, nil
}

// expandRemoved lists the trees of directories one side has and the
// other not, which the walk saw only at their top (unchanged on the side
// that has them), up to maxTreeEntries.
func expandRemoved(ctx context.Context, req DiffRequest, p *diffPlan, entries []DiffEntry) ([]DiffEntry, error) {
	out := entries[:0:0]
	budget := maxTreeEntries
	for _, e := range entries {
		out = append(out, e)
		if e.Kind != "dir" || (e.Status != DiffAdded && e.Status != DiffRemoved) || budget <= 0 {
			continue
		}
		s := p.b
		if e.Status == DiffAdded {
			s = p.a
		}
		q := walkReq{Root: e.Path, Excludes: req.Excludes, Limit: budget}
		_, _, err := guestWalk(ctx, s.c, q, func(r fileRec) {
			if r.Path == e.Path {
				return
			}
			budget--
			if ne, ok := compare(r.Path, pick(e.Status == DiffAdded, r), pick(e.Status == DiffRemoved, r)); ok {
				out = append(out, ne)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return dedupEntries(out), nil
}

func pick(ok bool, r fileRec) fileRec {
	if ok {
		return r
	}
	return fileRec{Path: r.Path, Missing: true}
}

// dedupEntries sorts entries by path and keeps the first of each.
func dedupEntries(es []DiffEntry) []DiffEntry {
	slices.SortStableFunc(es, func(a, b DiffEntry) int { return strings.Compare(a.Path, b.Path) })
	return slices.CompactFunc(es, func(a, b DiffEntry) bool { return a.Path == b.Path })
}

var kinds = map[string]string{"f": "file", "d": "dir", "l": "symlink", "o": "other"}

func statOf(r fileRec) *DiffStat {
	if r.Missing || r.Path == "" {
		return nil
	}
	if unknown(r) {
		return &DiffStat{Journal: true} // as the base had it: type and content unknown
	}
	return &DiffStat{Type: kinds[r.Type], Size: r.Size, Mode: r.Mode, UID: r.UID, GID: r.GID, SHA256: r.SHA256, Link: r.Link,
		MTime: r.MTime, Journal: r.Journal}
}

// compare is the entry of path x from its records on A (new) and B (old);
// ok is false where they do not differ.
func compare(x string, a, b fileRec) (DiffEntry, bool) {
	sa, sb := statOf(a), statOf(b)
	e := DiffEntry{Path: x, A: sa, B: sb}
	switch {
	case sa == nil && sb == nil:
		return e, false
	case sb == nil:
		e.Status, e.Kind = DiffAdded, cmp.Or(sa.Type, "file")
		return e, true
	case sa == nil:
		e.Status, e.Kind = DiffRemoved, cmp.Or(sb.Type, "file")
		return e, true
	}
	e.Status, e.Kind = DiffModified, sa.Type
	if sa.Type == "" || sb.Type == "" { // one side as the base had it, the other changed since
		e.Kind = sa.Type + sb.Type
		e.Changes = []string{"content"}
		return e, true
	}
	if sa.Type != sb.Type {
		e.Changes = append(e.Changes, "type")
	} else {
		if sa.Type == "file" && (sa.Size != sb.Size || sa.SHA256 != sb.SHA256 || (a.NoDigest && b.NoDigest && !sa.MTime.Equal(sb.MTime))) {
			e.Changes = append(e.Changes, "content")
		}
		if sa.Type == "symlink" && sa.Link != sb.Link {
			e.Changes = append(e.Changes, "target")
		}
	}
	if !sa.Journal && !sb.Journal {
		if sa.Mode != sb.Mode {
			e.Changes = append(e.Changes, "mode")
		}
		if sa.UID != sb.UID || sa.GID != sb.GID {
			e.Changes = append(e.Changes, "owner")
		}
	}
	return e, len(e.Changes) > 0
}

// renames pairs each removed file with an added one of the same content
// (a rename, or a copy and a delete: the same to the tree) in the page.
func renames(es []DiffEntry) []DiffEntry {
	added := map[string]int{}
	for i, e := range es {
		if e.Status == DiffAdded && e.Kind == "file" && e.A.SHA256 != "" && e.A.Size > 0 {
			if _, dup := added[e.A.SHA256]; !dup {
				added[e.A.SHA256] = i
			}
		}
	}
	drop := map[int]bool{}
	for i, e := range es {
		if e.Status != DiffRemoved || e.Kind != "file" || e.B.SHA256 == "" {
			continue
		}
		j, ok := added[e.B.SHA256]
		if !ok || drop[j] {
			continue
		}
		delete(added, e.B.SHA256)
		drop[i] = true
		es[j].Status, es[j].OldPath, es[j].B = DiffRenamed, e.Path, e.B
		if !e.B.Journal && !es[j].A.Journal && (es[j].A.Mode != e.B.Mode) {
			es[j].Changes = append(es[j].Changes, "mode")
		}
	}
	out := es[:0]
	for i, e := range es {
		if !drop[i] {
			out = append(out, e)
		}
	}
	return out
}

// patches adds a unified diff to each file entry whose sides are text of
// up to the cap, where asked; else says why there is none.
func (m *Manager) patches(ctx context.Context, req DiffRequest, p *diffPlan, es []DiffEntry) error {
	for i := range es {
		e := &es[i]
		if e.Kind != "file" || !slices.Contains([]string{DiffAdded, DiffRemoved, DiffModified}, e.Status) ||
			(e.Status == DiffModified && !slices.Contains(e.Changes, "content")) {
			continue
		}
		if !req.Patch {
			e.PatchOmitted = "not_asked"
			continue
		}
		if (e.A != nil && e.A.Size > req.PatchCap) || (e.B != nil && e.B.Size > req.PatchCap) {
			e.PatchOmitted = "too_large"
			continue
		}
		newText, okA, err := readSide(ctx, p.a, e.A, e.Path, req.PatchCap)
		if err != nil {
			return err
		}
		oldText, okB, err := readSide(ctx, p.b, e.B, e.Path, req.PatchCap)
		if err != nil {
			return err
		}
		if !okA || !okB {
			e.PatchOmitted = "no_content"
			continue
		}
		if !isText(newText) || !isText(oldText) {
			e.Binary, e.PatchOmitted = true, "binary"
			continue
		}
		from, to := "a"+e.Path, "b"+e.Path
		if e.B == nil {
			from = "/dev/null"
		}
		if e.A == nil {
			to = "/dev/null"
		}
		e.Patch = udiff.Unified(from, to, string(oldText), string(newText))
		for _, l := range strings.Split(e.Patch, "\n") {
			switch {
			case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			case strings.HasPrefix(l, "+"):
				e.Additions++
			case strings.HasPrefix(l, "-"):
				e.Deletions++
			}
		}
	}
	return nil
}

// readSide reads path's content on side s (empty for a side without the
// file); ok is false where the side has no content to read (a journal).
func readSide(ctx context.Context, s *diffSide, st *DiffStat, path string, limit int64) ([]byte, bool, error) {
	if st == nil {
		return nil, true, nil
	}
	if s.c == nil || st.Journal {
		return nil, false, nil
	}
	rc, _, err := s.c.Open(ctx, path)
	if err != nil {
		return nil, false, nil // gone meanwhile, or unreadable: no patch
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil || int64(len(b)) > limit {
		return nil, false, nil
	}
	return b, true, nil
}

// isText: UTF-8 without NUL bytes.
func isText(b []byte) bool {
	return utf8.Valid(b) && !bytes.Contains(b, []byte{0})
}
