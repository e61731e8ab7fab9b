package sandbox

import (
	"testing"
	"time"
)

// The network's events go to the newest running exec, else to the one
// that ended last within endGrace: an exec that ended before that takes
// none, whether or not a prune has forgotten it yet.
func TestExecLogActive(t *testing.T) {
	var r execLog
	r.init()
	now := time.Now()
	old := &execTrack{started: now.Add(-10 * time.Second), ended: now.Add(-endGrace - time.Second)}
	r.add("old", old) // prunes (nothing yet), so the next prunes do not
	if _, id := r.active(); id != "" {
		t.Fatalf("active %q, want none: old ended over endGrace ago", id)
	}
	// Prunes are at most every endGrace/4: "old" stays in the map here.
	r.add("recent", &execTrack{started: now.Add(-2 * time.Second), ended: now.Add(-time.Second)})
	if r.find("old") == nil {
		t.Fatal("old was pruned within endGrace/4 of the last prune")
	}
	if _, id := r.active(); id != "recent" {
		t.Errorf("active %q, want recent", id)
	}
	r.add("running", &execTrack{started: now.Add(-time.Minute)})
	if _, id := r.active(); id != "running" {
		t.Errorf("active %q, want running", id)
	}
}
