package blueprint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree creates files (relative path -> content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sevenSteps is a blueprint whose step 5 is a copy of ./app.
func sevenSteps() Blueprint {
	return Blueprint{Base: "debian-bookworm", Steps: []Step{
		{Run: "apt-get update"},
		{Env: map[string]string{"A": "1"}},
		{Workdir: "/opt"},
		{Run: "make"},
		{Copy: &Copy{Src: "app", Dest: "/opt/app"}},
		{Run: "make install"},
		{Run: "true"},
	}}
}

func mustKeys(t *testing.T, bp Blueprint, dir, snap string) []string {
	t.Helper()
	keys, err := Keys(bp, dir, snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(bp.Steps)+1 {
		t.Fatalf("got %d keys, want %d", len(keys), len(bp.Steps)+1)
	}
	return keys
}

// firstChanged is the index of the first key that differs.
func firstChanged(a, b []string) int {
	for i := range a {
		if a[i] != b[i] {
			for j := i; j < len(a); j++ {
				if a[j] == b[j] {
					return -2 // a later key did not change
				}
			}
			return i
		}
	}
	return -1
}

func TestKeysPropagate(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"app/main.go": "package main", "app/lib/x.txt": "x"})
	base := mustKeys(t, sevenSteps(), dir, "")
	if again := mustKeys(t, sevenSteps(), dir, ""); firstChanged(base, again) != -1 {
		t.Fatalf("keys are not stable: %v vs %v", base, again)
	}
	tests := []struct {
		name   string
		change func(bp *Blueprint)
		files  map[string]string
		want   int // first changed key; all later keys change too
	}{
		{"vcpus", func(bp *Blueprint) { bp.VCPUs = 2 }, nil, 0},
		{"step 1", func(bp *Blueprint) { bp.Steps[0].Run = "apt-get update -q" }, nil, 1},
		{"env value", func(bp *Blueprint) { bp.Steps[1].Env = map[string]string{"A": "2"} }, nil, 2},
		{"workdir", func(bp *Blueprint) { bp.Steps[2].Workdir = "/srv" }, nil, 3},
		{"copy dest", func(bp *Blueprint) { bp.Steps[4].Copy = &Copy{Src: "app", Dest: "/srv/app"} }, nil, 5},
		{"copied content", nil, map[string]string{"app/lib/x.txt": "y"}, 5},
		{"copied file added", nil, map[string]string{"app/new": ""}, 5},
		{"last step", func(bp *Blueprint) { bp.Steps[6].Run = "false" }, nil, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"app/main.go": "package main", "app/lib/x.txt": "x"})
			writeTree(t, dir, tc.files)
			bp := sevenSteps()
			if tc.change != nil {
				tc.change(&bp)
			}
			if got := firstChanged(base, mustKeys(t, bp, dir, "")); got != tc.want {
				t.Errorf("first changed key: got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestKeysFileMode(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"app/run.sh": "#!/bin/sh"})
	before := mustKeys(t, sevenSteps(), dir, "")
	if err := os.Chmod(filepath.Join(dir, "app/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := firstChanged(before, mustKeys(t, sevenSteps(), dir, "")); got != 5 {
		t.Errorf("first changed key after chmod: got %d, want 5", got)
	}
}

func TestKeysTemplateSnapshot(t *testing.T) {
	bp := Blueprint{Template: "py", Steps: []Step{{Run: "true"}}}
	a, b := mustKeys(t, bp, "", "sn1"), mustKeys(t, bp, "", "sn2")
	if got := firstChanged(a, b); got != 0 {
		t.Errorf("first changed key for a rebuilt template: got %d, want 0", got)
	}
}

func TestKeysSymlinkedSource(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"real/x": "x"})
	if err := os.Symlink("real", filepath.Join(dir, "app")); err != nil {
		t.Fatal(err)
	}
	bp := sevenSteps()
	linked := mustKeys(t, bp, dir, "")
	bp.Steps[4].Copy.Src = "real"
	direct := mustKeys(t, bp, dir, "")
	if got := firstChanged(linked, direct); got != 5 {
		t.Errorf("first changed key: got %d, want 5 (only the src name differs)", got)
	}
	tr, err := scan(filepath.Join(dir, "app"), dir, nil)
	if err != nil || len(tr.entries) != 2 {
		t.Errorf("scan of a symlinked directory: got %+v, %v, want its 2 entries", tr, err)
	}
}

func TestKeysCopyErrors(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"app/x": "x"})
	if err := os.Symlink(filepath.Join(dir, "app"), filepath.Join(dir, "app", "loop")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, src, want string
	}{
		{"missing", "nope", "step 5: copy"},
		{"symlinked directory", "app", "symlinks to directories"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bp := sevenSteps()
			bp.Steps[4].Copy.Src = tc.src
			_, err := Keys(bp, dir, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestHumanBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1536, "1.5 KiB"}, {12 << 20, "12.0 MiB"}, {3 << 30, "3.0 GiB"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := humanBytes(tc.n); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
