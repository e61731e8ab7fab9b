package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, figs []figure) string {
		p := filepath.Join(dir, name)
		b, _ := json.Marshal(benchFile{Figures: figs})
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := write("old.json", []figure{
		{Name: "fork 1", Value: 760, Unit: "ms", Text: "760.0 ms", Ratio: 4.65},
		{Name: "gone", Value: 1, Unit: "ms", Text: "1.0 ms"},
	})
	cur := write("new.json", []figure{
		{Name: "fork 1", Value: 527, Unit: "ms", Text: "527.0 ms", Ratio: 3.09, Goal: "≤ 2× floor"},
		{Name: "added", Value: 5, Unit: "ms", Text: "5.0 ms"},
	})
	var out strings.Builder
	if err := compare(&out, old, cur); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want header, rule and 3 rows:\n%s", len(lines), out.String())
	}
	for _, want := range []string{"| fork 1 | 760.0 ms | 527.0 ms |   -31% |     4.65× |     3.09× | ≤ 2× floor |", "| added  |        — |   5.0 ms |", "| gone   |   1.0 ms |        — |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	if err := compare(&out, filepath.Join(dir, "missing.json"), cur); err == nil {
		t.Error("a missing file: no error")
	}
}
