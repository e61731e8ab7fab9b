// Package figures holds the small pieces that the ci/ commands printing
// measured figures share: a three-column table and percentiles.
package figures

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Table collects rows of (name, value, notes) to print as a Markdown table.
type Table struct {
	// Head names the first column.
	Head   string
	rows   [][3]string
	failed []string
}

// Add appends a row.
func (t *Table) Add(name, value, note string) { t.rows = append(t.rows, [3]string{name, value, note}) }

// Print writes the table with aligned columns.
func (t *Table) Print(w io.Writer) {
	head := [3]string{t.Head, "value", "notes"}
	width := [3]int{}
	for _, r := range append([][3]string{head}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(r [3]string) {
		fmt.Fprintf(w, "| %-*s | %*s | %-*s |\n", width[0], r[0], width[1], r[1], width[2], r[2])
	}
	line(head)
	fmt.Fprintf(w, "|%s|%s|%s|\n", strings.Repeat("-", width[0]+2), strings.Repeat("-", width[1]+2), strings.Repeat("-", width[2]+2))
	for _, r := range t.rows {
		line(r)
	}
}

// Pct is the p-th quantile (0..1) of d by the nearest-rank-below rule; 0
// when d is empty.
func Pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

// Ms formats d in milliseconds with one decimal.
func Ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// P50P99 formats the median and 99th percentile of d as "a / b".
func P50P99(d []time.Duration) string { return Ms(Pct(d, 0.5)) + " / " + Ms(Pct(d, 0.99)) }

// Require appends a row that states a goal: the table fails (Failed) if
// ok is false.
func (t *Table) Require(name string, ok bool, value, note string) {
	t.Add(name, value, note)
	if !ok {
		t.failed = append(t.failed, name+": "+value)
	}
}

// Goal appends a row counting what should not happen (errors, losses,
// leaks): the table fails if n is not 0.
func (t *Table) Goal(name string, n int, note string) {
	if note != "" {
		note = "goal 0; " + note
	} else {
		note = "goal 0"
	}
	t.Require(name, n == 0, strconv.Itoa(n), note)
}

// Failed lists the rows whose goal was not met.
func (t *Table) Failed() []string { return t.failed }
