package logtest

import (
	"log/slog"
	"testing"
)

func TestCounter(t *testing.T) {
	c := &Counter{}
	seen := c.Seen("retrying")
	log := slog.New(c).With("k", "v")
	log.Info("hello")
	log.Warn("retrying")
	log.Error("gone")
	if got := c.Warns(); got != 1 {
		t.Errorf("warns: got %d, want 1 (the error is not a warning)", got)
	}
	select {
	case <-seen:
	default:
		t.Error("Seen's channel not closed after the record")
	}
	log.Warn("retrying") // a second record closes nothing twice
}
