// Package steps runs a VM's start (a boot, a restore, a wake) as a named
// list of steps: a reader sees the whole sequence in one place, each step
// says what undoes it, and a failure undoes the steps that ran, last first.
// It is the shape of firecracker-go-sdk's handler lists with e2b's cleanup
// stack folded in.
package steps

import "context"

// Step is one named part of a start.
type Step struct {
	// Name is the step's stable name; the phase log records it.
	Name string
	// Run does the step. A nil Run is skipped (a step that does not apply
	// to this start).
	Run func(ctx context.Context) error
	// Undo, if set, reverts a step that ran, when a later one fails.
	Undo func()
}

// List is a start's steps, in order.
type List []Step

// Run runs the steps in order, calling done with each one's name after it
// ran. The first error stops the list: the steps that ran are undone, last
// first, and the error is returned as it is (callers match it with
// errors.Is).
func (l List) Run(ctx context.Context, done func(name string)) error {
	for i, s := range l {
		if s.Run == nil {
			continue
		}
		if err := s.Run(ctx); err != nil {
			l[:i].undo()
			return err
		}
		if done != nil {
			done(s.Name)
		}
	}
	return nil
}

// undo reverts the steps of l, last first.
func (l List) undo() {
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].Undo != nil && l[i].Run != nil {
			l[i].Undo()
		}
	}
}

// Names lists the steps' names in order (for docs and tests).
func (l List) Names() []string {
	out := make([]string, 0, len(l))
	for _, s := range l {
		out = append(out, s.Name)
	}
	return out
}
