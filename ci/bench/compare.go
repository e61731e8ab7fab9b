package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// benchFile is what writeJSON writes.
type benchFile struct {
	Figures []figure `json:"figures"`
}

func readBench(path string) (benchFile, error) {
	var b benchFile
	data, err := os.ReadFile(path)
	if err != nil {
		return b, err
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// compare prints the figures of two runs (bin/bench.json files) side by
// side: each value, its change, and each ratio to its run's own floor,
// which is what to compare across machines or noisy runs. Figures are
// matched by name; one only in either run is listed with a dash.
func compare(w io.Writer, oldPath, newPath string) error {
	old, err := readBench(oldPath)
	if err != nil {
		return err
	}
	cur, err := readBench(newPath)
	if err != nil {
		return err
	}
	byName := map[string]figure{}
	for _, f := range old.Figures {
		byName[f.Name] = f
	}
	rows := [][]string{{"figure", "old", "new", "change", "old ratio", "new ratio", "goal"}}
	seen := map[string]bool{}
	for _, f := range cur.Figures {
		o, ok := byName[f.Name]
		seen[f.Name] = true
		if !ok {
			o = figure{Text: "—"}
		}
		rows = append(rows, []string{f.Name, o.Text, f.Text, change(o, f, ok), o.ratioText(), f.ratioText(), f.Goal})
	}
	for _, o := range old.Figures {
		if !seen[o.Name] {
			rows = append(rows, []string{o.Name, o.Text, "—", "", o.ratioText(), "", o.Goal})
		}
	}
	printRows(w, rows, 1, 2, 3, 4, 5)
	return nil
}

// change is new's value against old's, in percent ("" when either has no
// value or their units differ).
func change(old, cur figure, ok bool) string {
	if !ok || old.Value == 0 || cur.Value == 0 || old.Unit != cur.Unit {
		return ""
	}
	return fmt.Sprintf("%+.0f%%", 100*(cur.Value-old.Value)/old.Value)
}
