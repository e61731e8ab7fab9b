package agentclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/ttrpc"

	"github.com/agentbox/agentbox/agent/agentclient"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// TestDiffPages walks and stats a real agent's tree in pages smaller than
// the tree: every entry comes once, in order.
func TestDiffPages(t *testing.T) {
	c := newPair(t)
	root := t.TempDir()
	var paths []string
	for i := range 1500 {
		p := filepath.Join(root, fmt.Sprintf("f%04d", i))
		if err := os.WriteFile(p, []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	ctx := context.Background()
	n := 0
	if err := c.DiffStat(ctx, append(paths, root+"/gone"), 1<<20, func(e agentclient.DiffEntry) error {
		if n < len(paths) && (e.Path != paths[n] || e.Type != agentclient.DiffFile || len(e.SHA256) != 64) {
			t.Errorf("stat %d: %+v", n, e)
		}
		if n == len(paths) && e.Type != "" {
			t.Errorf("a missing path: %+v", e)
		}
		n++
		return nil
	}); err != nil || n != len(paths)+1 {
		t.Fatalf("stat: %d entries, %v", n, err)
	}
	after, seen := "", 0
	for {
		more, next, err := c.DiffWalk(ctx, agentclient.DiffWalkRequest{Root: root, After: after, Limit: 700}, func(e agentclient.DiffEntry) error {
			if e.Path <= after {
				t.Errorf("%q after %q", e.Path, after)
			}
			after = e.Path
			seen++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
		after = next
	}
	if seen != len(paths)+1 { // and the root
		t.Errorf("walk: %d entries, want %d", seen, len(paths)+1)
	}
}

// badDiff answers what a hostile guest would.
type badDiff struct {
	stat *agentv1.DiffStatResponse
	walk *agentv1.DiffWalkResponse
}

func (b badDiff) Stat(context.Context, *agentv1.DiffStatRequest) (*agentv1.DiffStatResponse, error) {
	return b.stat, nil
}

func (b badDiff) Walk(context.Context, *agentv1.DiffWalkRequest) (*agentv1.DiffWalkResponse, error) {
	return b.walk, nil
}

func diffAgent(t *testing.T, svc agentv1.DiffService) *agentclient.Client {
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
	if svc != nil {
		agentv1.RegisterDiffService(srv, svc)
	}
	go srv.Serve(context.Background(), l)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.New(conn)
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c
}

// TestDiffRefusesBadReplies: answers out of order, outside the root, that
// do not move on, or malformed end the call with ErrBadReply.
func TestDiffRefusesBadReplies(t *testing.T) {
	ent := func(p string) *agentv1.DiffEntry {
		return &agentv1.DiffEntry{Path: []byte(p), Type: agentv1.DiffType_DIFF_FILE}
	}
	walks := map[string]*agentv1.DiffWalkResponse{
		"unsorted":     {Entries: []*agentv1.DiffEntry{ent("/r/b"), ent("/r/a")}},
		"outside":      {Entries: []*agentv1.DiffEntry{ent("/etc/passwd")}},
		"stuck":        {More: true, Next: []byte("")},
		"too many":     {Entries: []*agentv1.DiffEntry{ent("/r/a"), ent("/r/b"), ent("/r/c")}},
		"bad digest":   {Entries: []*agentv1.DiffEntry{{Path: []byte("/r/a"), Type: agentv1.DiffType_DIFF_FILE, Sha256: []byte{1}}}},
		"bad type":     {Entries: []*agentv1.DiffEntry{{Path: []byte("/r/a"), Type: 99}}},
		"missing walk": {Entries: []*agentv1.DiffEntry{{Path: []byte("/r/a")}}},
	}
	for name, w := range walks {
		c := diffAgent(t, badDiff{walk: w})
		_, _, err := c.DiffWalk(context.Background(), agentclient.DiffWalkRequest{Root: "/r", Limit: 2}, func(agentclient.DiffEntry) error { return nil })
		if !errors.Is(err, agentclient.ErrBadReply) {
			t.Errorf("walk %s: %v, want ErrBadReply", name, err)
		}
	}
	stats := map[string]*agentv1.DiffStatResponse{
		"none":       {},
		"other path": {Entries: []*agentv1.DiffEntry{ent("/r/b")}},
		"negative":   {Entries: []*agentv1.DiffEntry{{Path: []byte("/r/a"), Type: agentv1.DiffType_DIFF_FILE, Size: -1}}},
	}
	for name, s := range stats {
		c := diffAgent(t, badDiff{stat: s})
		err := c.DiffStat(context.Background(), []string{"/r/a"}, 0, func(agentclient.DiffEntry) error { return nil })
		if !errors.Is(err, agentclient.ErrBadReply) {
			t.Errorf("stat %s: %v, want ErrBadReply", name, err)
		}
	}
	c := diffAgent(t, nil) // an agent older than the service
	if err := c.DiffStat(context.Background(), []string{"/r/a"}, 0, func(agentclient.DiffEntry) error { return nil }); !errors.Is(err, agentclient.ErrNoDiff) {
		t.Errorf("an old agent: %v, want ErrNoDiff", err)
	}
}
