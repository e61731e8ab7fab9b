package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// EventQuery selects flight-recorder events (zero fields: no filter).
type EventQuery struct {
	Types        []AuditEventType
	Since, Until time.Time
	// After keeps ids above it (paging: pass the last NextAfter).
	After int64
	// Limit caps one page (0: the server's default, 1000).
	Limit int
}

func (q EventQuery) params() *ListSandboxEventsParams {
	p := &ListSandboxEventsParams{}
	if len(q.Types) > 0 {
		p.Type = &q.Types
	}
	if !q.Since.IsZero() {
		p.Since = &q.Since
	}
	if !q.Until.IsZero() {
		p.Until = &q.Until
	}
	if q.After > 0 {
		p.After = &q.After
	}
	if q.Limit > 0 {
		p.Limit = &q.Limit
	}
	return p
}

// Events returns one page of a sandbox's flight recorder, oldest first.
func (c *Client) Events(ctx context.Context, id string, q EventQuery) (AuditEventList, error) {
	var list AuditEventList
	err := decode(c.raw.ListSandboxEvents(ctx, id, q.params()))(http.StatusOK, &list)
	return list, err
}

// NetworkEvents returns a sandbox's network events with ids above after (0:
// from the start), at most limit (0: the server's default).
func (c *Client) NetworkEvents(ctx context.Context, id string, after int64, limit int) ([]AuditEvent, error) {
	list, err := c.Events(ctx, id, EventQuery{Types: []AuditEventType{AuditEventTypeNetwork}, After: after, Limit: limit})
	return list.Events, err
}

// FollowEvents calls fn for each event q selects, then for each new one as
// hostd records it, until ctx ends, fn fails, or the sandbox is deleted
// (then it returns nil after the deletion event).
func (c *Client) FollowEvents(ctx context.Context, id string, q EventQuery, fn func(AuditEvent) error) error {
	p := q.params()
	follow := true
	p.Follow = &follow
	body, err := c.eventLines(ctx, id, p)
	if err != nil {
		return err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	for sc.Scan() {
		var ev AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("client: bad event line: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("client: events stream: %w", err)
	}
	return ctx.Err()
}

// ExportEvents copies every event q selects to w as JSON Lines.
func (c *Client) ExportEvents(ctx context.Context, id string, q EventQuery, w io.Writer) error {
	p := q.params()
	jsonl := ListSandboxEventsParamsFormatJsonl
	p.Format = &jsonl
	body, err := c.eventLines(ctx, id, p)
	if err != nil {
		return err
	}
	defer body.Close()
	_, err = io.Copy(w, body)
	return err
}

// eventLines opens a JSON Lines response of the events route.
func (c *Client) eventLines(ctx context.Context, id string, p *ListSandboxEventsParams) (io.ReadCloser, error) {
	resp, err := c.raw.ListSandboxEvents(ctx, id, p)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp.Body, nil
}
