package steps

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestRunInOrderAndUndoOnFailure(t *testing.T) {
	var log []string
	step := func(name string, fail bool) Step {
		return Step{Name: name,
			Run: func(context.Context) error {
				log = append(log, "run "+name)
				if fail {
					return errors.New("boom")
				}
				return nil
			},
			Undo: func() { log = append(log, "undo "+name) }}
	}
	var done []string
	l := List{step("a", false), {Name: "skipped"}, step("b", false), step("c", true), step("d", false)}
	err := l.Run(context.Background(), func(n string) { done = append(done, n) })
	if err == nil || err.Error() != "boom" {
		t.Fatalf("got %v, want boom", err)
	}
	want := []string{"run a", "run b", "run c", "undo b", "undo a"}
	if !slices.Equal(log, want) {
		t.Errorf("got %v, want %v", log, want)
	}
	if !slices.Equal(done, []string{"a", "b"}) {
		t.Errorf("done: got %v, want [a b]", done)
	}
	if got := l.Names(); !slices.Equal(got, []string{"a", "skipped", "b", "c", "d"}) {
		t.Errorf("names: got %v", got)
	}
}

func TestRunAllDoesNotUndo(t *testing.T) {
	undone := false
	l := List{{Name: "a", Run: func(context.Context) error { return nil }, Undo: func() { undone = true }}}
	if err := l.Run(context.Background(), nil); err != nil || undone {
		t.Fatalf("got err %v undone %v, want nil false", err, undone)
	}
}
