package watch

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

func TestRingNext(t *testing.T) {
	r := NewRing(3)
	ctx := context.Background()
	if b := r.Next(ctx, 0, 0, 0); len(b.Events) != 0 || b.Head != 0 {
		t.Errorf("empty: got %+v", b)
	}
	for range 5 {
		r.Add(&agentv1.GuestEvent{})
	}
	tests := []struct {
		after      uint64
		max        int
		first, n   int
		head, lost uint64
	}{
		{0, 0, 3, 3, 5, 2},
		{2, 0, 3, 3, 5, 0},
		{3, 1, 4, 1, 5, 0},
		{5, 0, 0, 0, 5, 0},
		{9, 0, 0, 0, 5, 0},
	}
	for _, tc := range tests {
		b := r.Next(ctx, tc.after, 0, tc.max)
		if len(b.Events) != tc.n || b.Head != tc.head || b.Lost != tc.lost || (tc.n > 0 && b.Events[0].Seq != uint64(tc.first)) {
			t.Errorf("after %d max %d: got %d events head %d lost %d, want %d from %d, head %d lost %d",
				tc.after, tc.max, len(b.Events), b.Head, b.Lost, tc.n, tc.first, tc.head, tc.lost)
		}
	}
	// An after above the head does not wait: with an hour to wait, it
	// returns before the (hang-guard) ctx ends.
	gctx, gcancel := context.WithTimeout(ctx, time.Minute)
	r.Next(gctx, 9, time.Hour, 0)
	if gctx.Err() != nil {
		t.Error("after above the head waited")
	}
	gcancel()
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	if b := r.Next(cctx, 5, 10*time.Second, 0); len(b.Events) != 0 {
		t.Errorf("cancelled: got %+v", b)
	}
}

func TestWritableMounts(t *testing.T) {
	in := `/dev/vda / ext4 rw,relatime 0 0
proc /proc proc rw,nosuid 0 0
tmpfs /run tmpfs rw 0 0
tmpfs /dev/shm tmpfs rw 0 0
/dev/vdb /data ext4 rw 0 0
/dev/vdc /ro ext4 ro 0 0
tmpfs /my\040dir tmpfs rw 0 0
`
	got := parseWritableMounts(strings.NewReader(in), DefaultIgnore)
	if want := "/|/data|/my dir"; strings.Join(got, "|") != want {
		t.Errorf("got %q, want %q", strings.Join(got, "|"), want)
	}
}

func TestPathSet(t *testing.T) {
	s := newPathSet(4)
	for _, p := range []string{"a", "b", "c", "d", "e"} {
		s.add(p)
	}
	if s.remove("a") || !s.remove("e") || !s.remove("c") {
		t.Errorf("got set %v; want the oldest half forgotten once full", s.set)
	}
	for i := range 100 {
		s.add("x")
		s.remove("x")
		_ = i
	}
	if len(s.order) > 8 {
		t.Errorf("order grew to %d", len(s.order))
	}
}

// TestRingEventsStayEncodable: an event about a file whose name is not
// UTF-8 still encodes (proto strings refuse invalid UTF-8; one such event
// would fail every batch holding it).
func TestRingEventsStayEncodable(t *testing.T) {
	r := NewRing(4)
	r.Add(&agentv1.GuestEvent{Kind: &agentv1.GuestEvent_File{File: &agentv1.FileEvent{Op: "created", Path: "/root/caf\xe9"}}})
	b := r.Next(context.Background(), 0, 0, 4)
	resp := &agentv1.NextEventsResponse{Events: b.Events, Head: b.Head}
	if _, err := proto.Marshal(resp); err != nil {
		t.Fatalf("a batch with a non-UTF-8 name: %v", err)
	}
	if got := b.Events[0].GetFile().Path; got != "/root/caf\uFFFD" {
		t.Fatalf("path %q", got)
	}
}
