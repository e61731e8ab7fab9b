//go:build vm

package hostd_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestListDirPaged100k lists a guest directory of 100,000 entries through
// the API: every page holds at most its limit (hostd's default 1000, or
// the caller's), the pages together are every entry once in name order,
// the Go client's ListDir follows the cursor to all of them, and a bad
// limit or cursor is a 400 with its code.
func TestListDirPaged100k(t *testing.T) {
	const n = 100000
	c, _ := startHostd(t)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), sb.ID) })
	// On a tmpfs, one touch per few thousand names: 100k files fast even
	// under TCG on a busy host (on the ext4 root it takes minutes).
	mkctx, cancel := context.WithTimeout(ctx, 15*time.Minute) // a hang guard, not a timing
	defer cancel()
	res, err := c.Exec(mkctx, sb.ID, client.ExecRequest{Cmd: []string{"sh", "-c",
		fmt.Sprintf("mkdir /root/many && mount -t tmpfs -o size=64m,nr_inodes=200000 tmpfs /root/many && cd /root/many && seq -f f%%06g 0 %d | xargs touch", n-1)}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("make %d files: %+v, %v", n, res, err)
	}

	pages, seen := 0, 0
	for page, err := range c.ListDirPages(ctx, sb.ID, "/root/many", 0) {
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if len(page.Entries) > 1000 {
			t.Fatalf("page %d: %d entries, want at most the default 1000", pages, len(page.Entries))
		}
		for _, e := range page.Entries {
			if want := fmt.Sprintf("f%06d", seen); e.Name != want {
				t.Fatalf("entry %d: got %s, want %s", seen, e.Name, want)
			}
			seen++
		}
		pages++
	}
	if seen != n || pages != n/1000 {
		t.Errorf("got %d entries in %d pages, want %d in %d", seen, pages, n, n/1000)
	}

	// A page of the caller's size, and the next one from its cursor.
	first, err := c.ListDirPage(ctx, sb.ID, "/root/many", "", 10000)
	if err != nil || len(first.Entries) != 10000 || first.NextCursor == "" {
		t.Fatalf("limit 10000: %d entries, cursor %q, %v", len(first.Entries), first.NextCursor, err)
	}
	second, err := c.ListDirPage(ctx, sb.ID, "/root/many", first.NextCursor, 3)
	if err != nil || len(second.Entries) != 3 || second.Entries[0].Name != "f010000" {
		t.Fatalf("from the cursor: %+v, %v", second.Entries, err)
	}
	all, err := c.ListDir(ctx, sb.ID, "/root/many")
	if err != nil || len(all) != n || all[n-1].Name != fmt.Sprintf("f%06d", n-1) {
		t.Fatalf("ListDir: %d entries, %v", len(all), err)
	}

	// The last page carries no cursor.
	tail, err := c.ListDirPage(ctx, sb.ID, "/root", "", 10000)
	if err != nil || tail.NextCursor != "" {
		t.Errorf("a small directory: cursor %q, %v", tail.NextCursor, err)
	}

	for _, tc := range []struct {
		name, cursor string
		limit        int
	}{{"limit over the maximum", "", 10001}, {"not a cursor", "!!not base64!!", 0}} {
		_, err := c.ListDirPage(ctx, sb.ID, "/root/many", tc.cursor, tc.limit)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.HasPrefix(ae.Code, "invalid_") {
			t.Errorf("%s: got %v, want a 400 invalid_*", tc.name, err)
		}
	}
}
