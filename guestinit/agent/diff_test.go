package agent

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/waitfor"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// diffTree makes a tree whose names sort differently by path bytes than
// by a depth-first walk ("a" < "a.c" < "a/b"), with a symlink, a FIFO and
// a non-UTF-8 name.
func diffTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"a/b", "a/c", "z", "skip/x"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a.c", "a/b/f", "a/c/g", "a0", "z/h", "skip/x/y", "caf\xe9"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.c", filepath.Join(root, "ln")); err != nil {
		t.Fatal(err)
	}
	return root
}

// walkAll pages through a walk with limit entries a page.
func walkAll(t *testing.T, d *Diff, req *agentv1.DiffWalkRequest) []string {
	t.Helper()
	var got []string
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("the walk does not end")
		}
		r, err := d.Walk(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Entries {
			got = append(got, string(e.Path))
		}
		if !r.More {
			return got
		}
		if string(r.Next) <= string(req.After) {
			t.Fatalf("page after %q stopped at %q", req.After, r.Next)
		}
		req.After = r.Next
	}
}

func TestDiffWalkSortsByPathBytesAndPages(t *testing.T) {
	root := diffTree(t)
	rel := func(ps []string) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		}
		return out
	}
	want := []string{"", "a", "a.c", "a/b", "a/b/f", "a/c", "a/c/g", "a0", "caf\xe9", "ln", "z", "z/h"}
	for _, limit := range []uint32{1, 2, 5, 100} {
		req := &agentv1.DiffWalkRequest{Root: []byte(root), Excludes: [][]byte{[]byte(root + "/skip")}, Limit: limit}
		if got := rel(walkAll(t, NewDiff(), req)); !slices.Equal(got, want) {
			t.Errorf("limit %d: got %q, want %q", limit, got, want)
		}
	}
	// A clock that runs out the budget at every step still moves on.
	tick := time.Unix(0, 0)
	slow := &Diff{now: func() time.Time { tick = tick.Add(diffBudget); return tick }}
	req := &agentv1.DiffWalkRequest{Root: []byte(root), Excludes: [][]byte{[]byte(root + "/skip")}, Limit: 100}
	if got := rel(walkAll(t, slow, req)); !slices.Equal(got, want) {
		t.Errorf("slow: got %q, want %q", got, want)
	}
}

func TestDiffWalkSince(t *testing.T) {
	root := diffTree(t)
	old := time.Now().Add(-time.Hour)
	_ = filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error {
		_ = os.Chtimes(p, old, old)
		return nil
	})
	// ctime cannot be set back: since is a marker's ctime, and the changes
	// come at a later tick of the filesystem's (coarse) clock.
	marker := filepath.Join(t.TempDir(), "m")
	ctime := func() int64 {
		var st unix.Stat_t
		if err := os.WriteFile(marker, nil, 0o600); err != nil || unix.Lstat(marker, &st) != nil {
			t.Fatal(err)
		}
		return st.Ctim.Nano()
	}
	since := ctime()
	waitfor.Cond(t, "the filesystem clock's next tick", func() bool { return ctime() > since })
	if err := os.WriteFile(filepath.Join(root, "a/c/new"), nil, 0o600); err != nil { // a/c changes
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "z/h"), 0o600); err != nil { // ctime only
		t.Fatal(err)
	}
	d := NewDiff()
	dirs := walkAll(t, d, &agentv1.DiffWalkRequest{Root: []byte(root), SinceNs: since, DirsOnly: true, Limit: 10})
	if want := []string{root + "/a/c"}; !slices.Equal(dirs, want) {
		t.Errorf("changed dirs: got %q, want %q", dirs, want)
	}
	got := walkAll(t, d, &agentv1.DiffWalkRequest{Root: []byte(root), SinceNs: since, Limit: 10,
		Lists: [][]byte{[]byte(root + "/a/b")}})
	want := []string{root, root + "/a/b/f", root + "/a/c", root + "/a/c/g", root + "/a/c/new", root + "/z/h"}
	if !slices.Equal(got, want) {
		t.Errorf("since: got %q, want %q", got, want)
	}
}

func TestDiffStat(t *testing.T) {
	root := diffTree(t)
	d := NewDiff()
	f, ln, gone := filepath.Join(root, "a.c"), filepath.Join(root, "ln"), filepath.Join(root, "nope")
	r, err := d.Stat(context.Background(), &agentv1.DiffStatRequest{Paths: [][]byte{[]byte(f), []byte(ln), []byte(gone)}, MaxDigestBytes: 1 << 20})
	if err != nil || len(r.Entries) != 3 {
		t.Fatalf("stat: %v %v", r, err)
	}
	sum := sha256.Sum256([]byte("a.c"))
	if e := r.Entries[0]; e.Type != agentv1.DiffType_DIFF_FILE || e.Mode != 0o640 || e.Size != 3 || string(e.Sha256) != string(sum[:]) {
		t.Errorf("file: %v", e)
	}
	if e := r.Entries[1]; e.Type != agentv1.DiffType_DIFF_SYMLINK || string(e.Link) != "a.c" {
		t.Errorf("symlink: %v", e)
	}
	if e := r.Entries[2]; e.Type != agentv1.DiffType_DIFF_MISSING || string(e.Path) != gone {
		t.Errorf("missing: %v", e)
	}
	r, err = d.Stat(context.Background(), &agentv1.DiffStatRequest{Paths: [][]byte{[]byte(f)}, MaxDigestBytes: 2})
	if err != nil || r.Entries[0].DigestError != "too_large" || len(r.Entries[0].Sha256) != 0 {
		t.Errorf("over the digest bound: %v %v", r, err)
	}
	for _, bad := range []*agentv1.DiffStatRequest{{Paths: [][]byte{[]byte("rel")}}, {Paths: make([][]byte, diffMaxStatPaths+1)}} {
		if _, err := d.Stat(context.Background(), bad); err == nil {
			t.Errorf("stat of %d paths (%q…) answered", len(bad.Paths), bad.Paths[0])
		}
	}
	if _, err := d.Walk(context.Background(), &agentv1.DiffWalkRequest{Root: []byte(root), Limit: 0}); err == nil {
		t.Error("a walk of limit 0 answered")
	}
}
