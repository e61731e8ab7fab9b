package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// DiffOptions choose a diff page (zero fields: the server's defaults).
type DiffOptions struct {
	// Path limits the diff to a subtree; Excludes replace the default
	// excludes (/proc /sys /dev /run /tmp) when NoDefaultExcludes or
	// non-empty.
	Path              string
	Excludes          []string
	NoDefaultExcludes bool
	// Method is "auto", "journal", "walk" or "full".
	Method        string
	Patch         bool
	MaxPatchBytes int64
	Cursor        string
	Limit         int
	Events        bool
}

func (o DiffOptions) params(against string) DiffSandboxParams {
	p := DiffSandboxParams{Against: &against}
	if o.Path != "" {
		p.Path = &o.Path
	}
	if len(o.Excludes) > 0 || o.NoDefaultExcludes {
		ex := o.Excludes
		if len(ex) == 0 {
			ex = []string{""}
		}
		p.Exclude = &ex
	}
	if o.Method != "" {
		m := DiffSandboxParamsMethod(o.Method)
		p.Method = &m
	}
	if o.Patch {
		p.Patch = &o.Patch
	}
	if o.MaxPatchBytes > 0 {
		p.MaxPatchBytes = &o.MaxPatchBytes
	}
	if o.Cursor != "" {
		p.Cursor = &o.Cursor
	}
	if o.Limit > 0 {
		p.Limit = &o.Limit
	}
	if o.Events {
		p.Events = &o.Events
	}
	return p
}

// Diff returns one page of what id (a sandbox "sb-…" or a snapshot
// "sn-…") has that against has not.
func (c *Client) Diff(ctx context.Context, id, against string, o DiffOptions) (Diff, error) {
	var d Diff
	p := o.params(against)
	if strings.HasPrefix(id, "sn-") {
		q := DiffSnapshotParams{Against: p.Against, Path: p.Path, Exclude: p.Exclude, Patch: p.Patch, MaxPatchBytes: p.MaxPatchBytes,
			Cursor: p.Cursor, Limit: p.Limit, Events: p.Events}
		if p.Method != nil {
			m := DiffSnapshotParamsMethod(*p.Method)
			q.Method = &m
		}
		return d, decode(c.raw.DiffSnapshot(ctx, id, &q))(http.StatusOK, &d)
	}
	return d, decode(c.raw.DiffSandbox(ctx, id, &p))(http.StatusOK, &d)
}

// DiffAll calls fn with every page of a diff, following the cursor.
func (c *Client) DiffAll(ctx context.Context, id, against string, o DiffOptions, fn func(Diff) error) error {
	for {
		d, err := c.Diff(ctx, id, against, o)
		if err != nil {
			return err
		}
		if err := fn(d); err != nil {
			return err
		}
		if d.NextCursor == "" {
			return nil
		}
		o.Cursor, o.Events = d.NextCursor, false
	}
}

// Lineage returns the tree of snapshots and forks sandbox id belongs to.
func (c *Client) Lineage(ctx context.Context, id string) (Lineage, error) {
	var l Lineage
	return l, decode(c.raw.GetSandboxLineage(ctx, id))(http.StatusOK, &l)
}

// Replay restores snapshot id n times, runs cmd in each and returns the
// runs; progress, if set, gets each started and finished line as it comes.
func (c *Client) Replay(ctx context.Context, id string, req ReplayRequest, progress func(ReplayEvent)) (ReplayResult, error) {
	stream := true
	resp, err := c.raw.ReplaySnapshot(ctx, id, &ReplaySnapshotParams{Stream: &stream}, req)
	if err != nil {
		return ReplayResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ReplayResult{}, decode(resp, nil)(http.StatusOK, nil)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev ReplayEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return ReplayResult{}, fmt.Errorf("client: replay: %w", err)
		}
		if ev.Type == ReplayEventTypeResult && ev.Result != nil {
			return *ev.Result, nil
		}
		if ev.Type != ReplayEventTypeStarted && ev.Type != ReplayEventTypeFinished {
			return ReplayResult{}, fmt.Errorf("client: replay: %s", sc.Text())
		}
		if progress != nil {
			progress(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return ReplayResult{}, fmt.Errorf("client: replay: %w", err)
	}
	return ReplayResult{}, fmt.Errorf("client: replay: the stream ended without a result")
}
