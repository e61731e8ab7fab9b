package sandbox

import (
	"testing"

	"github.com/agentbox/agentbox/agent/agentclient"
)

func TestWatchEventFilter(t *testing.T) {
	ev := func(op, p, old string) agentclient.GuestEvent {
		return agentclient.GuestEvent{File: &agentclient.FileEvent{Op: op, Path: p, OldPath: old}}
	}
	cases := []struct {
		e         agentclient.GuestEvent
		recursive bool
		want      string // "" = dropped
	}{
		{ev("created", "/w/a", ""), false, "create"},
		{ev("modified", "/w/sub/a", ""), false, ""},
		{ev("modified", "/w/sub/a", ""), true, "modify"},
		{ev("deleted", "/wx/a", ""), true, ""},
		{ev("deleted", "/w", ""), true, ""},
		{ev("renamed", "/elsewhere", "/w/a"), false, "rename"},
		{ev("weird", "/w/a", ""), true, ""},
		{agentclient.GuestEvent{}, true, ""},
	}
	for _, c := range cases {
		got, ok := watchEvent(c.e, "/w", c.recursive)
		if (c.want == "") == ok || (ok && got.Type != c.want) {
			t.Errorf("%+v recursive=%v: got %+v %v, want %q", c.e.File, c.recursive, got, ok, c.want)
		}
	}
}
