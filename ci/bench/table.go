package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// figure is one row of the table, and of bin/bench.json.
type figure struct {
	Name string `json:"name"`
	// Value in Unit (ms, MiB/s, MiB, ...); Text is it as printed.
	Value float64 `json:"value,omitempty"`
	Unit  string  `json:"unit,omitempty"`
	Text  string  `json:"text"`
	// Floor is what the machine itself does for this figure (measured in
	// the same run), Ratio the value over it.
	FloorName  string  `json:"floor_name,omitempty"`
	FloorValue float64 `json:"floor_value,omitempty"`
	Ratio      float64 `json:"ratio,omitempty"`
	Goal       string  `json:"goal,omitempty"`
	Note       string  `json:"note,omitempty"`
}

// table collects the figures to print.
type table struct{ figs []figure }

// add is a figure without a floor.
func (t *table) add(name, value, note string) {
	t.figs = append(t.figs, figure{Name: name, Text: value, Note: note})
}

// dur adds a duration with its floor (0: none) and goal.
func (t *table) dur(name string, d time.Duration, floorName string, floor time.Duration, goal, note string) {
	f := figure{Name: name, Value: msf(d), Unit: "ms", Text: ms(d), Goal: goal, Note: note}
	if floor > 0 {
		f.FloorName, f.FloorValue, f.Ratio = floorName, msf(floor), float64(d)/float64(floor)
	}
	t.figs = append(t.figs, f)
}

// rate adds a throughput in MiB/s with its floor (0: none) and goal.
func (t *table) rate(name string, mibs float64, floorName string, floor float64, goal, note string) {
	f := figure{Name: name, Value: mibs, Unit: "MiB/s", Text: fmt.Sprintf("%.1f MiB/s", mibs), Goal: goal, Note: note}
	if floor > 0 {
		f.FloorName, f.FloorValue, f.Ratio = floorName, floor, mibs/floor
	}
	t.figs = append(t.figs, f)
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (f figure) floorText() string {
	if f.FloorName == "" {
		return ""
	}
	v := fmt.Sprintf("%.1f %s", f.FloorValue, f.Unit)
	return v + " (" + f.FloorName + ")"
}

func (f figure) ratioText() string {
	if f.Ratio == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", f.Ratio)
}

func (t *table) print(w io.Writer) {
	cols := []string{"figure", "value", "floor (same run)", "ratio", "goal", "notes"}
	rows := [][]string{cols}
	for _, f := range t.figs {
		rows = append(rows, []string{f.Name, f.Text, f.floorText(), f.ratioText(), f.Goal, f.Note})
	}
	printRows(w, rows, 1, 3)
}

// printRows prints rows (the first is the header) as a Markdown table,
// the columns in right aligned to the right.
func printRows(w io.Writer, rows [][]string, right ...int) {
	cols := rows[0]
	width := make([]int, len(cols))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		for i, c := range r {
			pad := width[i] - len([]rune(c))
			if slices.Contains(right, i) {
				fmt.Fprintf(&b, "| %s%s ", strings.Repeat(" ", pad), c)
			} else {
				fmt.Fprintf(&b, "| %s%s ", c, strings.Repeat(" ", pad))
			}
		}
		fmt.Fprintln(w, b.String()+"|")
	}
	line(rows[0])
	var sep strings.Builder
	for _, n := range width {
		sep.WriteString("|" + strings.Repeat("-", n+2))
	}
	fmt.Fprintln(w, sep.String()+"|")
	for _, r := range rows[1:] {
		line(r)
	}
}

// writeJSON writes the figures to path (bin/bench.json by default).
func (t *table) writeJSON(path string) error {
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(struct {
		When    time.Time `json:"when"`
		Figures []figure  `json:"figures"`
	}{time.Now().UTC(), t.figs}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// progress says on stderr what the bench is doing, with the time so far.
type progress struct {
	start time.Time
	w     io.Writer
}

func (p *progress) step(msg string) {
	fmt.Fprintf(p.w, "bench [%6.1fs] %s\n", time.Since(p.start).Seconds(), msg)
}

// phases collects hostd's "create phase" debug records (hostd/sandbox
// phases.go) while it passes every record on to the log file.
type phases struct {
	slog.Handler
	mu    *sync.Mutex
	took  map[string][]time.Duration // "path/phase"
	order *[]string                  // the keys of took, first seen first
}

func newPhases(next slog.Handler) *phases {
	return &phases{Handler: next, mu: &sync.Mutex{}, took: map[string][]time.Duration{}, order: new([]string)}
}

func (p *phases) Enabled(context.Context, slog.Level) bool { return true }

func (p *phases) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "create phase" {
		var path, phase string
		var took time.Duration
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "path":
				path = a.Value.String()
			case "phase":
				phase = a.Value.String()
			case "took":
				took = a.Value.Duration()
			}
			return true
		})
		if path == "" {
			path = "create"
		}
		k := path + "/" + phase
		p.mu.Lock()
		if _, ok := p.took[k]; !ok {
			*p.order = append(*p.order, k)
		}
		p.took[k] = append(p.took[k], took)
		p.mu.Unlock()
	}
	return p.Handler.Handle(ctx, r)
}

func (p *phases) WithAttrs(as []slog.Attr) slog.Handler {
	return &phases{Handler: p.Handler.WithAttrs(as), mu: p.mu, took: p.took, order: p.order}
}

func (p *phases) WithGroup(name string) slog.Handler {
	return &phases{Handler: p.Handler.WithGroup(name), mu: p.mu, took: p.took, order: p.order}
}

// take returns the phases collected since the last take, in the order
// first seen, and forgets them.
func (p *phases) take() ([]string, map[string][]time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys, got := *p.order, make(map[string][]time.Duration, len(p.took))
	for k, v := range p.took {
		got[k] = v
	}
	clear(p.took) // in place: the handlers derived by WithAttrs share it
	*p.order = nil
	return keys, got
}

// addPhases adds the p50 of each phase collected since the last take as
// rows under label.
func (t *table) addPhases(label string, p *phases) {
	if p == nil {
		return
	}
	keys, got := p.take()
	for _, k := range keys {
		t.dur(fmt.Sprintf("  %s phase %s, p50 of %d", label, k, len(got[k])), pct(got[k], 0.5), "", 0, "", "")
	}
}
