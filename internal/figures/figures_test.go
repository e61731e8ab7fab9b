package figures

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if got := Pct(d, 0.5); got != 50*time.Millisecond {
		t.Errorf("p50 = %v", got)
	}
	if got := Pct(d, 0.99); got != 99*time.Millisecond {
		t.Errorf("p99 = %v", got)
	}
	if d[0] != 100*time.Millisecond {
		t.Error("Pct reordered its input")
	}
	if Pct(nil, 0.5) != 0 {
		t.Error("empty input")
	}
}

func TestTablePrint(t *testing.T) {
	tb := Table{Head: "part"}
	tb.Add("load", "12", "0 errors")
	var b bytes.Buffer
	tb.Print(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "| part") || !strings.Contains(lines[2], "0 errors") {
		t.Fatalf("table:\n%s", b.String())
	}
	if len(lines[0]) != len(lines[2]) {
		t.Errorf("columns not aligned:\n%s", b.String())
	}
}

func TestGoals(t *testing.T) {
	tb := Table{Head: "part"}
	tb.Goal("lost", 0, "")
	tb.Require("running", true, "yes", "")
	if f := tb.Failed(); len(f) != 0 {
		t.Fatalf("met goals failed: %v", f)
	}
	tb.Goal("leaks", 2, "cgroups")
	tb.Require("answers", false, "no", "")
	if f := tb.Failed(); len(f) != 2 || f[0] != "leaks: 2" || f[1] != "answers: no" {
		t.Errorf("failed = %q, want the leaks and answers rows", f)
	}
	var b bytes.Buffer
	tb.Print(&b)
	if !strings.Contains(b.String(), "goal 0; cgroups") {
		t.Errorf("goal row's note:\n%s", b.String())
	}
}
