package agentclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/guestinit/agent"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// TestListManyFilesInPages lists a directory whose one-reply listing
// would be over ttrpc's 4 MiB (it used to end the whole connection, a
// streamed exec with it): the listing comes in pages, complete and sorted,
// and an exec started before it still runs to its end.
func TestListManyFilesInPages(t *testing.T) {
	c := newPair(t)
	ctx := context.Background()
	dir := t.TempDir()
	const n = 12000
	long := strings.Repeat("x", 200)
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%05d", long, i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	id, err := c.Start(ctx, agentclient.Command{Argv: []string{"sh", "-c", "sleep 1; echo done"}})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := c.List(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != n {
		t.Fatalf("listed %d entries, want %d", len(ents), n)
	}
	for i, e := range ents {
		if want := fmt.Sprintf("%s-%05d", long, i); e.Name != want {
			t.Fatalf("entry %d is %q, want %q", i, e.Name, want)
		}
	}
	var out bytes.Buffer
	exit, err := c.Follow(ctx, id, 0, func(o agentclient.Output) error { out.Write(o.Data); return nil })
	if err != nil || exit.Code != 0 || out.String() != "done\n" {
		t.Fatalf("exec after the listing: %q, %+v, %v", out.String(), exit, err)
	}
}

// TestNonUTF8Names: a name that is not UTF-8 is listed, read, stat'ed and
// reported in errors with its exact bytes, and leaves the connection up.
func TestNonUTF8Names(t *testing.T) {
	c := newPair(t)
	ctx := context.Background()
	dir := t.TempDir()
	name := "caf\xe9-\xff.txt"
	if err := os.WriteFile(filepath.Join(dir, name), []byte("latin-1"), 0o644); err != nil {
		t.Fatal(err)
	}
	ents, err := c.List(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name != name || ents[0].Path != filepath.Join(dir, name) {
		t.Fatalf("listed %+v", ents)
	}
	rc, _, err := c.Open(ctx, ents[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "latin-1" {
		t.Fatalf("read %q", b)
	}
	if fi, err := c.Stat(ctx, ents[0].Path); err != nil || fi.Name != name {
		t.Fatalf("stat: %+v, %v", fi, err)
	}
	missing := filepath.Join(dir, "\xfe\xfd")
	_, err = c.Stat(ctx, missing)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != missing || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of a missing non-UTF-8 name: %v", err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("the connection did not survive: %v", err)
	}
}

// TestWriteFileKeepsSetuid: the setuid, setgid and sticky bits of a write
// are kept, not dropped.
func TestWriteFileKeepsSetuid(t *testing.T) {
	c := newPair(t)
	p := filepath.Join(t.TempDir(), "tool")
	mode := fs.FileMode(0o755) | fs.ModeSetuid | fs.ModeSetgid
	if _, err := c.WriteFile(context.Background(), p, mode, strings.NewReader("#!/bin/sh\n")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky); got != mode {
		t.Fatalf("mode %v, want %v", got, mode)
	}
}

// TestWriteFileDeferSync: a write that defers its fsync is whole and in
// place at once, on both paths, and SyncFS then syncs its filesystem (or
// says why not).
func TestWriteFileDeferSync(t *testing.T) {
	for name, streams := range map[string]bool{"streams": true, "chunks": false} {
		t.Run(name, func(t *testing.T) {
			c := newPairWith(t, streams)
			ctx := context.Background()
			dir := t.TempDir()
			p := filepath.Join(dir, "f")
			if _, err := c.WriteFile(ctx, p, 0o640, strings.NewReader("deferred"), agentclient.DeferSync()); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(p); err != nil || string(b) != "deferred" {
				t.Fatalf("read back %q, %v", b, err)
			}
			if err := c.SyncFS(ctx, dir); err != nil {
				t.Errorf("syncfs: %v", err)
			}
			if err := c.SyncFS(ctx, filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("syncfs of a missing path: %v, want not found", err)
			}
		})
	}
}

// TestSyncFSOnAnOlderAgent: an agent without SyncFS (it syncs every file
// it writes) answers Unimplemented, which is no error.
func TestSyncFSOnAnOlderAgent(t *testing.T) {
	c := serveOnly(t, func(srv *ttrpc.Server) { // and no Files service
		agentv1.RegisterSystemService(srv, agent.NewSystem(time.Now()))
	})
	if err := c.SyncFS(context.Background(), "/"); err != nil {
		t.Errorf("syncfs on an agent without it: %v", err)
	}
}
