package main

import "testing"

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
