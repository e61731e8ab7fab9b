package deptest

import (
	"slices"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"testing", "testing", true},
		{"testing", "testing/iotest", false},
		{"example.com/a/...", "example.com/a", true},
		{"example.com/a/...", "example.com/a/b/c", true},
		{"example.com/a/...", "example.com/ab", false},
	} {
		if got := Match(tc.pattern, tc.path); got != tc.want {
			t.Errorf("Match(%q, %q): got %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}

func TestProblems(t *testing.T) {
	pkgs := []Package{
		{Path: "fmt", Standard: true},
		{Path: "testing", Standard: true},
		{Path: "example.com/fuzzy", Imports: []string{"testing"}},
		{Path: "example.com/bad/x", Imports: []string{"fmt"}},
		{Path: "example.com/ok/y", Imports: []string{"example.com/fuzzy"}},
		{Path: "example.com/new"},
		{Path: "example.com/main", Imports: []string{"example.com/bad/x", "example.com/ok/y", "example.com/new", "fmt"}},
	}
	c := Checker{
		Pkg:        "example.com/main",
		BadDeps:    map[string]string{"testing": "no tests in binaries", "example.com/bad/...": "too big"},
		ImportedBy: map[string][]string{"testing": {"example.com/fuzzy"}},
		Allow:      []string{"example.com/main", "example.com/ok/...", "example.com/fuzzy"},
	}
	want := []string{
		"example.com/main links example.com/bad/x (imported by example.com/main): too big",
		"example.com/main links example.com/new (imported by example.com/main), which its allow list does not have: if it is meant, add it to Allow in the binary's deps_test.go, deliberately",
	}
	if got := c.Problems(pkgs); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	// A package of our own importing testing is reported, the exception
	// notwithstanding.
	pkgs[6].Imports = append(pkgs[6].Imports, "testing")
	got := c.Problems(pkgs)
	if len(got) != 3 || got[0] != "example.com/main links testing (imported by example.com/main): no tests in binaries" {
		t.Errorf("got %q, want testing reported first", got)
	}
}
