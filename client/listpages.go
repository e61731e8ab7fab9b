package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
)

// ListDirPage lists one page of a guest directory: up to limit entries (0
// = hostd's default page) after cursor ("" for the first page). The page's
// NextCursor is "" on the last page.
func (c *Client) ListDirPage(ctx context.Context, id, path, cursor string, limit int) (FileList, error) {
	params := &ListDirParams{Path: path}
	if limit > 0 {
		params.Limit = &limit
	}
	if cursor != "" {
		params.Cursor = &cursor
	}
	var list FileList
	err := decode(c.raw.ListDir(ctx, id, params))(http.StatusOK, &list)
	return list, err
}

// ListDirPages yields a guest directory's pages in order, following each
// page's cursor, up to limit entries a page (0 = hostd's default), so a
// caller can take a large directory without holding it whole. An error
// ends the sequence.
func (c *Client) ListDirPages(ctx context.Context, id, path string, limit int) iter.Seq2[FileList, error] {
	return func(yield func(FileList, error) bool) {
		cursor := ""
		for {
			page, err := c.ListDirPage(ctx, id, path, cursor, limit)
			if err != nil {
				yield(FileList{}, err)
				return
			}
			if !yield(page, nil) || page.NextCursor == "" {
				return
			}
			if page.NextCursor == cursor {
				yield(FileList{}, fmt.Errorf("client: list %s: the cursor does not move on", path))
				return
			}
			cursor = page.NextCursor
		}
	}
}
