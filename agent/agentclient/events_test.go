package agentclient_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/guestinit/watch"
	"github.com/agentbox/agentbox/internal/waitfor"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// newEventsPair serves the Events service over ring and returns a client.
func newEventsPair(t *testing.T, ring *watch.Ring, watchErr string) *agentclient.Client {
	return serveOnly(t, func(srv *ttrpc.Server) { agentv1.RegisterEventsService(srv, watch.NewService(ring, watchErr)) })
}

// serveOnly serves on a unix socket the ttrpc services that register puts
// on its server, and returns a client of them.
func serveOnly(t *testing.T, register func(*ttrpc.Server)) *agentclient.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	register(srv)
	go srv.Serve(context.Background(), l)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.New(conn)
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return c
}

func TestNextEvents(t *testing.T) {
	ring := watch.NewRing(4)
	c := newEventsPair(t, ring, "")
	ctx := context.Background()
	at := time.Unix(1700000000, 42)
	ring.Add(&agentv1.GuestEvent{TimeUnixNano: at.UnixNano(), ExecId: "e1", Pid: 7, Kind: &agentv1.GuestEvent_File{
		File: &agentv1.FileEvent{Op: "renamed", Path: "/root/b", OldPath: "/root/a", Size: 3, Sha256: "ab"}}})
	ring.Add(&agentv1.GuestEvent{ExecId: "e1", Kind: &agentv1.GuestEvent_Package{
		Package: &agentv1.PackageEvent{Manager: "pip", Action: "upgraded", Name: "demo", Version: "0.2", OldVersion: "0.1", Path: "/x/METADATA"}}})

	got, err := c.NextEvents(ctx, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Head != 2 || got.Lost != 0 || len(got.Events) != 2 {
		t.Fatalf("got head %d lost %d %d events, want 2, 0, 2", got.Head, got.Lost, len(got.Events))
	}
	f := got.Events[0]
	wantFile := agentclient.FileEvent{Op: "renamed", Path: "/root/b", OldPath: "/root/a", Size: 3, SHA256: "ab"}
	if f.Seq != 1 || !f.Time.Equal(at) || f.ExecID != "e1" || f.PID != 7 || f.File == nil || *f.File != wantFile || f.Package != nil {
		t.Errorf("got %+v (file %+v), want seq 1 at %v by e1/7 with %+v", f, f.File, at, wantFile)
	}
	wantPkg := agentclient.PackageEvent{Manager: "pip", Action: "upgraded", Name: "demo", Version: "0.2", OldVersion: "0.1", Path: "/x/METADATA"}
	if p := got.Events[1]; p.Seq != 2 || p.Package == nil || *p.Package != wantPkg || p.File != nil {
		t.Errorf("got %+v, want seq 2 with %+v", p, wantPkg)
	}

	// After above the head: nothing, and the head to start from.
	if got, err := c.NextEvents(ctx, 99, time.Second, 0); err != nil || len(got.Events) != 0 || got.Head != 2 {
		t.Errorf("after 99: got %+v, %v; want no events and head 2", got, err)
	}
	// The ring holds 4: after six adds, events 1 and 2 are lost.
	for range 4 {
		ring.Add(&agentv1.GuestEvent{Kind: &agentv1.GuestEvent_File{File: &agentv1.FileEvent{Op: "modified", Path: "/f"}}})
	}
	got, err = c.NextEvents(ctx, 0, 0, 2)
	if err != nil || got.Lost != 2 || len(got.Events) != 2 || got.Events[0].Seq != 3 || got.Head != 6 {
		t.Errorf("after a wrap: got %+v, %v; want lost 2, events 3 and 4 of head 6", got, err)
	}
	// Waiting at the head returns the next event when it comes, added once
	// the guest's Next waits. (A wait that ended without the event would
	// return none.)
	waited := make(chan error, 1)
	go func() {
		var err error
		got, err = c.NextEvents(ctx, 6, time.Minute, 0)
		waited <- err
	}()
	waitfor.Blocked(t, "watch.(*Ring).Next")
	ring.Add(&agentv1.GuestEvent{Kind: &agentv1.GuestEvent_File{File: &agentv1.FileEvent{Op: "created", Path: "/g"}}})
	if err := <-waited; err != nil || len(got.Events) != 1 || got.Events[0].Seq != 7 {
		t.Errorf("wait: got %+v, %v; want event 7", got, err)
	}
	// And times out without one: no events, no error.
	if got, err := c.NextEvents(ctx, 7, 100*time.Millisecond, 0); err != nil || len(got.Events) != 0 || got.Head != 7 {
		t.Errorf("timeout: got %+v, %v; want no events at head 7", got, err)
	}
}

func TestNextEventsWatchError(t *testing.T) {
	c := newEventsPair(t, watch.NewRing(0), "fanotify_init: function not implemented")
	got, err := c.NextEvents(context.Background(), 0, 0, 0)
	if err != nil || got.WatchError != "fanotify_init: function not implemented" || got.Head != 0 {
		t.Errorf("got %+v, %v; want the watch error and head 0", got, err)
	}
}
