package agent

import (
	"container/heap"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Walk lists the entries under req.Root in path byte order, from after
// req.After, until the limit, the page's bytes or its time: a lazy walk
// that keeps, in a heap, the entries it has seen but not answered and the
// directories it has yet to read, each directory keyed by its path and a
// slash (every path beneath it sorts after that key). A directory whose
// whole subtree sorts before req.After is never read.
func (d *Diff) Walk(ctx context.Context, req *agentv1.DiffWalkRequest) (*agentv1.DiffWalkResponse, error) {
	w, err := newWalk(req)
	if err != nil {
		return nil, toStatus(err)
	}
	var root unix.Stat_t
	if w.excluded(w.root) || unix.Lstat(w.root, &root) != nil {
		return &agentv1.DiffWalkResponse{}, nil
	}
	w.dev = root.Dev
	w.offer(w.root, &root, false)
	start, size := d.now(), 0
	resp := &agentv1.DiffWalkResponse{}
	last := w.after
	for w.h.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return nil, toStatus(err)
		}
		if last > w.after && d.now().Sub(start) >= diffBudget { // moved on: answer
			resp.More, resp.Next = true, []byte(last)
			return resp, nil
		}
		it := heap.Pop(&w.h).(walkItem)
		if it.expand {
			w.expand(it)
			last = it.key
			continue
		}
		if len(resp.Entries) >= w.limit || size >= diffReplyBytes {
			resp.More, resp.Next = true, []byte(last)
			return resp, nil
		}
		e := &agentv1.DiffEntry{Path: []byte(it.key), Type: agentv1.DiffType_DIFF_DIR}
		if !w.dirsOnly {
			e = diffEntry(it.key, &it.st, w.maxDigest)
		}
		size += proto.Size(e) + 8
		resp.Entries = append(resp.Entries, e)
		last = it.key
	}
	return resp, nil
}

// walk is one Walk call's state.
type walk struct {
	root, after string
	excludes    []string
	lists       map[string]bool
	since       int64
	limit       int
	dirsOnly    bool
	maxDigest   uint64
	dev         uint64
	h           walkHeap
}

func newWalk(req *agentv1.DiffWalkRequest) (*walk, error) {
	root, err := cleanPath(req.Root)
	if err != nil {
		return nil, err
	}
	w := &walk{root: root, after: string(req.After), since: req.SinceNs, limit: int(req.Limit),
		dirsOnly: req.DirsOnly, maxDigest: req.MaxDigestBytes, lists: make(map[string]bool, len(req.Lists))}
	if w.limit <= 0 || w.limit > diffMaxLimit {
		return nil, fmt.Errorf("%w: limit %d, not 1..%d", errBadArgs, req.Limit, diffMaxLimit)
	}
	for _, b := range req.Excludes {
		e, err := cleanPath(b)
		if err != nil {
			return nil, err
		}
		w.excludes = append(w.excludes, e)
	}
	for _, b := range req.Lists {
		l, err := cleanPath(b)
		if err != nil {
			return nil, err
		}
		w.lists[l] = true
	}
	return w, nil
}

// excluded reports whether p is an exclude or under one.
func (w *walk) excluded(p string) bool {
	for _, e := range w.excludes {
		if p == e || strings.HasPrefix(p, strings.TrimSuffix(e, "/")+"/") {
			return true
		}
	}
	return false
}

// mine reports whether st changed after since (always, without since).
func (w *walk) mine(st *unix.Stat_t) bool {
	return w.since == 0 || max(st.Ctim.Nano(), st.Mtim.Nano()) > w.since
}

// offer pushes p: as an entry where the walk lists it (changed, or a child
// of a listed directory; the root always, but in dirs_only), and as a
// directory to read where it is one on the root's filesystem whose
// subtree reaches past after.
func (w *walk) offer(p string, st *unix.Stat_t, parentListed bool) {
	mine, isDir := w.mine(st), st.Mode&unix.S_IFMT == unix.S_IFDIR
	listed := mine || parentListed || p == w.root
	if w.dirsOnly {
		listed = mine && isDir
	}
	if listed && p > w.after {
		heap.Push(&w.h, walkItem{key: p, st: *st})
	}
	if !isDir || st.Dev != w.dev {
		return
	}
	prefix := strings.TrimSuffix(p, "/") + "/"
	if w.after >= prefix[:len(prefix)-1]+"0" { // '0' follows '/': past the subtree
		return
	}
	heap.Push(&w.h, walkItem{key: prefix, expand: true, children: (mine || w.lists[p]) && !w.dirsOnly})
}

// expand reads a directory's children and offers each.
func (w *walk) expand(it walkItem) {
	dir := it.key
	if dir != "/" {
		dir = strings.TrimSuffix(dir, "/")
	}
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	for _, n := range names {
		p := filepath.Join(dir, n)
		if w.after >= p+"0" {
			continue // p and all beneath it sort before the page
		}
		if w.excluded(p) {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			continue // removed meanwhile
		}
		w.offer(p, &st, it.children)
	}
}

// walkItem is an entry to answer (key: its path) or a directory to read
// (expand; key: its path and a slash; children: list them all).
type walkItem struct {
	key      string
	expand   bool
	children bool
	st       unix.Stat_t
}

// walkHeap orders items by key, an entry before a directory of the same key.
type walkHeap []walkItem

func (h walkHeap) Len() int { return len(h) }
func (h walkHeap) Less(i, j int) bool {
	if h[i].key != h[j].key {
		return h[i].key < h[j].key
	}
	return !h[i].expand && h[j].expand
}
func (h walkHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *walkHeap) Push(x any)   { *h = append(*h, x.(walkItem)) }
func (h *walkHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
