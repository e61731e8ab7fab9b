package client

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
)

// ReadFile streams the guest file at path into w. A transfer that breaks
// part way returns an error; w then holds a prefix of the file.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) error {
	resp, err := c.raw.ReadFile(ctx, id, &ReadFileParams{Path: path})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("client: read %s: %w", path, err)
	}
	return nil
}

// WriteFile streams r into the guest file at path, which the guest replaces
// atomically. mode is the file's permission bits (0 for hostd's 0644).
func (c *Client) WriteFile(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) error {
	params := &WriteFileParams{Path: path}
	if mode != 0 {
		params.Mode = fmt.Sprintf("%04o", unixMode(mode))
	}
	return decode(c.raw.WriteFileWithBody(ctx, id, params, "application/octet-stream", r))(http.StatusNoContent, nil)
}

// unixMode returns m's permission bits with setuid, setgid and sticky as
// Unix has them.
func unixMode(m fs.FileMode) uint32 {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return n
}

// ListDir lists a guest directory, every entry, sorted by name bytes: it
// follows the listing's cursor page by page (ListDirPages streams them).
func (c *Client) ListDir(ctx context.Context, id, path string) ([]FileInfo, error) {
	var out []FileInfo
	for page, err := range c.ListDirPages(ctx, id, path, 0) {
		if err != nil {
			return nil, err
		}
		out = append(out, page.Entries...)
	}
	return out, nil
}

// Stat describes a guest file.
func (c *Client) Stat(ctx context.Context, id, path string) (FileInfo, error) {
	var fi FileInfo
	err := decode(c.raw.StatFile(ctx, id, &StatFileParams{Path: path}))(http.StatusOK, &fi)
	return fi, err
}

// Mkdir creates a guest directory and its parents.
func (c *Client) Mkdir(ctx context.Context, id, path string) error {
	return decode(c.raw.MakeDir(ctx, id, &MakeDirParams{Path: path}))(http.StatusNoContent, nil)
}

// Remove removes a guest file, or a directory and its contents if recursive.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	return decode(c.raw.RemoveFile(ctx, id, &RemoveFileParams{Path: path, Recursive: recursive}))(http.StatusNoContent, nil)
}

// Move renames a guest file or directory.
func (c *Client) Move(ctx context.Context, id, from, to string) error {
	return decode(c.raw.MoveFile(ctx, id, MoveRequest{From: from, To: to}))(http.StatusNoContent, nil)
}
