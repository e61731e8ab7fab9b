package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// PutArchive streams a tar (or gzip-compressed tar, detected by hostd) from
// r and unpacks it under guest directory dir, which is created if missing.
// An entry that would land outside dir fails with an *APIError of code
// "invalid_archive" whose message names the entry.
func (c *Client) PutArchive(ctx context.Context, id, dir string, r io.Reader) (ArchiveResult, error) {
	var res ArchiveResult
	err := decode(c.raw.PutArchiveWithBody(ctx, id, &PutArchiveParams{Path: dir}, "application/x-tar", r))(http.StatusOK, &res)
	return res, err
}

// GetArchive streams guest directory dir into w as tar (names relative to
// dir). A transfer that breaks part way returns an error.
func (c *Client) GetArchive(ctx context.Context, id, dir string, w io.Writer) error {
	resp, err := c.raw.GetArchive(ctx, id, &GetArchiveParams{Path: dir})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("client: archive %s: %w", dir, err)
	}
	return nil
}

// maxWatchLine bounds one watch event line.
const maxWatchLine = 64 << 10

// Watch calls fn for each change under guest directory dir (and its
// subdirectories if recursive) until ctx ends (then it returns ctx's
// error), fn fails, or hostd ends the stream (the sandbox was deleted:
// then it returns nil).
func (c *Client) Watch(ctx context.Context, id, dir string, recursive bool, fn func(WatchEvent) error) error {
	resp, err := c.raw.WatchDir(ctx, id, &WatchDirParams{Path: dir, Recursive: recursive})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4<<10), maxWatchLine)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev WatchEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("client: bad watch event: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("client: watch stream: %w", err)
	}
	return nil
}
