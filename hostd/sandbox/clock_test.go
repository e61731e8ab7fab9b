package sandbox

import (
	"testing"
	"time"
)

// TestHostTime: a time the guest stamped is kept when it is in the past,
// and becomes the host's now when it is missing or ahead (a guest clock
// ahead, or a guest lying), so a sandbox's events never run ahead of the
// recorder's clock.
func TestHostTime(t *testing.T) {
	before := time.Now()
	past := before.Add(-time.Hour)
	if got := hostTime(past); !got.Equal(past) {
		t.Errorf("a past guest time: got %v, want it kept (%v)", got, past)
	}
	for name, guest := range map[string]time.Time{"zero": {}, "ahead": before.Add(time.Hour)} {
		got := hostTime(guest)
		if got.Before(before) || got.After(time.Now()) {
			t.Errorf("%s guest time %v: got %v, want the host's now", name, guest, got)
		}
	}
}
