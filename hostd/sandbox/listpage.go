package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// DirPage is one page of a guest directory's entries, sorted by name bytes.
type DirPage struct {
	Entries []FileInfo
	// More is set when entries remain after the last one: list again with
	// After set to its name.
	More bool
}

// ListDirPage lists up to limit (1..agentclient.MaxPageEntries) entries of
// a guest directory, those whose names sort after after ("" for the
// first page). Its memory is the page's, whatever the directory's size.
func (f *Files) ListDirPage(ctx context.Context, id, p, after string, limit int) (DirPage, error) {
	var page DirPage
	err := f.withAgent(ctx, id, []string{p}, func(c *agentclient.Client) error {
		var a []byte
		if after != "" {
			a = []byte(after)
		}
		ents, more, err := c.ListPage(ctx, p, a, limit)
		if err != nil {
			return err
		}
		page.More = more
		page.Entries = make([]FileInfo, 0, len(ents))
		for _, e := range ents {
			page.Entries = append(page.Entries, fileInfo(e))
		}
		return nil
	})
	return page, err
}
