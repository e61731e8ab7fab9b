package client

import (
	"context"
	"net/http"
	"time"
)

// ExecBackground starts a command and returns its session id at once; read
// its output later with Attach or drive it with PTY.
func (c *Client) ExecBackground(ctx context.Context, id string, req ExecRequest) (string, error) {
	req.Background = true
	var res ExecStarted
	err := decode(c.raw.ExecCommand(ctx, id, nil, req))(http.StatusAccepted, &res)
	return res.ExecID, err
}

// ListExecs lists a sandbox's exec sessions, running and finished.
func (c *Client) ListExecs(ctx context.Context, id string) ([]ExecSession, error) {
	var list ExecSessionList
	err := decode(c.raw.ListExecs(ctx, id))(http.StatusOK, &list)
	return list.Sessions, err
}

// Attach re-attaches to session execID and calls fn for each event from
// byte offset on, like ExecStream: start, output (each with its Offset),
// exit. To resume a cut stream, pass the Offset of the last output event
// seen plus the length of its Data.
func (c *Client) Attach(ctx context.Context, id, execID string, offset int64, fn func(Event) error) error {
	resp, err := c.raw.AttachExec(ctx, id, execID, &AttachExecParams{Offset: offset})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp)
	}
	return readEvents(resp.Body, fn)
}

// PortAccess describes the service URLs of a sandbox's TCP port and the
// sandbox's access token.
func (c *Client) PortAccess(ctx context.Context, id string, port int) (PortAccess, error) {
	var pa PortAccess
	err := decode(c.raw.GetPort(ctx, id, port))(http.StatusOK, &pa)
	return pa, err
}

// SetPortPublic makes a port's service URLs public (no credential needed)
// or private again.
func (c *Client) SetPortPublic(ctx context.Context, id string, port int, public bool) (PortAccess, error) {
	var pa PortAccess
	err := decode(c.raw.SetPort(ctx, id, port, PortSettings{Public: public}))(http.StatusOK, &pa)
	return pa, err
}

// ShareLink makes a signed link to a port that expires after ttl (0: an
// hour).
func (c *Client) ShareLink(ctx context.Context, id string, port int, ttl time.Duration) (ShareLink, error) {
	var l ShareLink
	err := decode(c.raw.CreateShareLink(ctx, id, port, ShareLinkRequest{ExpiresInS: int(ttl / time.Second)}))(http.StatusCreated, &l)
	return l, err
}
