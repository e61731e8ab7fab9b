package agentclient

import (
	"bytes"
	"context"
	"fmt"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// MaxPageEntries bounds the entries of one ListPage.
const MaxPageEntries = 10000

// ListPage describes up to max (1..MaxPageEntries) of a guest directory's
// entries, sorted by name bytes, those after the name after (nil for the
// first page); more reports that entries remain after the last one. It
// asks the agent for pages until it has max entries or the directory
// ends, so its memory is the page's, never the directory's.
func (c *Client) ListPage(ctx context.Context, path string, after []byte, max int) (out []FileInfo, more bool, err error) {
	if max <= 0 || max > MaxPageEntries {
		return nil, false, fmt.Errorf("agentclient: list page of %d entries (1 to %d)", max, MaxPageEntries)
	}
	for {
		r, err := c.files.List(ctx, &agentv1.ListRequest{Path: []byte(path), After: after, MaxEntries: uint32(max - len(out))})
		if err != nil {
			return nil, false, fromStatus(err)
		}
		if len(r.Entries) > max-len(out) {
			return nil, false, fmt.Errorf("agentclient: list %s: the agent answered %d entries, asked for %d", path, len(r.Entries), max-len(out))
		}
		for _, e := range r.Entries {
			fi := infoFrom(e)
			if err := checkInfo(fi); err != nil {
				return nil, false, err
			}
			out = append(out, fi)
		}
		switch {
		case !r.More:
			return out, false, nil
		case len(r.Entries) == 0 || bytes.Compare(r.Entries[len(r.Entries)-1].Name, after) <= 0:
			return nil, false, fmt.Errorf("agentclient: list %s: the agent's page does not move on", path)
		case len(out) == max:
			return out, true, nil
		}
		after = r.Entries[len(r.Entries)-1].Name
	}
}
