package sandbox

import (
	"slices"
	"testing"
	"time"
)

func TestSmallestKeepsTheFirstDistinct(t *testing.T) {
	s := newSmallest(3)
	for _, p := range []string{"/e", "/b", "/d", "/b", "/a", "/c", "/a"} {
		s.add(p)
	}
	if got, want := s.sorted(), []string{"/a", "/b", "/c"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestCompareAndRenames(t *testing.T) {
	file := func(p, sum string, mode uint32) fileRec {
		return fileRec{Path: p, Type: "f", Size: 3, SHA256: sum, Mode: mode}
	}
	gone := func(p string) fileRec { return fileRec{Path: p, Missing: true} }
	big := func(mtime int64) fileRec { // over maxDigestBytes: no digest
		return fileRec{Path: "/x", Type: "f", Size: maxDigestBytes + 1, Mode: 0o644, MTime: time.Unix(mtime, 0), NoDigest: true}
	}
	cases := []struct {
		name    string
		a, b    fileRec
		ok      bool
		status  string
		changes []string
	}{
		{"same", file("/x", "s1", 0o644), file("/x", "s1", 0o644), false, "", nil},
		{"content", file("/x", "s2", 0o644), file("/x", "s1", 0o644), true, DiffModified, []string{"content"}},
		{"mode", file("/x", "s1", 0o600), file("/x", "s1", 0o644), true, DiffModified, []string{"mode"}},
		{"added", file("/x", "s1", 0o644), gone("/x"), true, DiffAdded, nil},
		{"removed", gone("/x"), file("/x", "s1", 0o644), true, DiffRemoved, nil},
		{"neither", gone("/x"), gone("/x"), false, "", nil},
		{"journal side untouched", file("/x", "s2", 0o644), fileRec{Path: "/x", Journal: true}, true, DiffModified, []string{"content"}},
		{"too large to hash, same mtime", big(1), big(1), false, "", nil},
		{"too large to hash, other mtime", big(2), big(1), true, DiffModified, []string{"content"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := compare("/x", tc.a, tc.b)
			if ok != tc.ok || (ok && (e.Status != tc.status || !slices.Equal(e.Changes, tc.changes))) {
				t.Errorf("got %v %s %v, want %v %s %v", ok, e.Status, e.Changes, tc.ok, tc.status, tc.changes)
			}
		})
	}
	add, _ := compare("/new", file("/new", "s9", 0o644), gone("/new"))
	rm, _ := compare("/old", gone("/old"), file("/old", "s9", 0o644))
	got := renames([]DiffEntry{add, rm})
	if len(got) != 1 || got[0].Status != DiffRenamed || got[0].OldPath != "/old" {
		t.Errorf("renames: got %+v", got)
	}
}

func TestInDiff(t *testing.T) {
	ex := DefaultDiffExcludes
	for p, want := range map[string]bool{"/root/a": true, "/proc/1": false, "/tmpx": true, "/tmp": false, "/etc": false} {
		root := "/"
		if p == "/etc" {
			root = "/root"
		}
		if got := inDiff(p, root, ex); got != want {
			t.Errorf("inDiff(%s, %s): got %v, want %v", p, root, got, want)
		}
	}
}
