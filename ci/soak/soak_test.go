package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmm"
)

func TestDiffLines(t *testing.T) {
	want := "a  f1\nb  f2\nc  f3\n"
	for _, tc := range []struct {
		got  string
		diff int
	}{
		{want, 0},
		{"a  f1\nX  f2\nc  f3\n", 1}, // changed
		{"a  f1\nc  f3\n", 1},        // lost
		{"", 3},
	} {
		if n := diffLines(want, tc.got); n != tc.diff {
			t.Errorf("diffLines(%q) = %d, want %d", tc.got, n, tc.diff)
		}
	}
}

func TestLeaksSince(t *testing.T) {
	vmA, vmB, vmGone, vmWarm := vmm.Process{PID: 1, StartTime: 1}, vmm.Process{PID: 2, StartTime: 2}, vmm.Process{PID: 3, StartTime: 3}, vmm.Process{PID: 4, StartTime: 4}
	set := func(ids ...string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	// While no hostd ran: running sandbox a, failed sandbox f (its VMM
	// still up), and the dead hostd's warm sandbox w.
	before := hostView{vmms: map[vmm.Process]string{vmA: "a", vmGone: "f", vmWarm: "w"},
		nets: set("a", "f", "w"), cgroups: set("a", "w"), dirs: set("a", "f", "w")}
	want := expected{listed: set("a", "f", "n"), running: map[string]vmm.Process{"a": vmA, "n": vmB}}
	clean := hostView{vmms: map[vmm.Process]string{vmA: "a", vmB: "n"}, nets: set("a", "n"), cgroups: set("a", "n"), dirs: set("a", "f", "n")}
	if got := leaksSince(before, clean, want); len(got) != 0 {
		t.Errorf("a clean restart: leaks %q", got)
	}
	dirty := hostView{vmms: map[vmm.Process]string{vmA: "a", vmB: "n", vmGone: "f", vmWarm: "w"},
		nets: set("a", "f"), cgroups: set("a", "w"), dirs: set("a", "f", "w")}
	wantLeaks := []string{"cgroup w", "namespace f", "sandbox dir w", "vmm pid 3 (sandbox f)", "vmm pid 4 (sandbox w)"}
	if got := leaksSince(before, dirty, want); !slices.Equal(got, wantLeaks) {
		t.Errorf("leaks = %q, want %q", got, wantLeaks)
	}
	second := hostView{vmms: map[vmm.Process]string{vmA: "a", {PID: 9, StartTime: 9}: "a"}}
	if got := leaksSince(hostView{}, second, want); len(got) != 1 || !strings.HasPrefix(got[0], "second vmm pid 9") {
		t.Errorf("a second VMM of a running sandbox: leaks %q", got)
	}
	if got := before.only(set("f")).left(); !slices.Equal(got, []string{"namespace f", "sandbox dir f", "vmm pid 3 (sandbox f)"}) {
		t.Errorf("only(f).left() = %q", got)
	}
}
