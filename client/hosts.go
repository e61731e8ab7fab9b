package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/apitypes"
)

// Hosts lists a fleet's hosts (admin; the control plane only: hostd alone
// answers 404).
func (c *Client) Hosts(ctx context.Context) ([]Host, error) {
	var list apitypes.HostList
	err := decode(c.fleetCall(ctx, http.MethodGet, "v1/hosts", nil))(http.StatusOK, &list)
	return list.Hosts, err
}

// SetHostAdmin cordons ("cordon": no new sandboxes), drains ("drain") or
// reactivates ("uncordon") a host of a fleet.
func (c *Client) SetHostAdmin(ctx context.Context, host, action string) (Host, error) {
	var h Host
	err := decode(c.fleetCall(ctx, http.MethodPost, "v1/hosts/"+url.PathEscape(host)+"/"+url.PathEscape(action), nil))(http.StatusOK, &h)
	return h, err
}

// DrainHost drains a host of a fleet: nothing new is placed there and,
// when the fleet's snapshots are portable, every sandbox moves off it
// (running ones keep their processes) before it answers. An error with
// the sandboxes that did not move is an *APIError (409) and the HostDrain
// it said.
func (c *Client) DrainHost(ctx context.Context, host string) (HostDrain, error) {
	var d HostDrain
	resp, err := c.fleetCall(ctx, http.MethodPost, "v1/hosts/"+url.PathEscape(host)+"/drain", nil)
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return d, err
	}
	if resp.StatusCode == http.StatusConflict && json.Unmarshal(b, &d) == nil && d.Name != "" {
		return d, &APIError{Status: resp.StatusCode, Code: "drain_incomplete", Message: drainNote(d)}
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return d, decode(resp, nil)(http.StatusOK, &d)
}

func drainNote(d HostDrain) string {
	var b strings.Builder
	b.WriteString("host " + d.Name + ": ")
	n := 0
	for id, why := range d.Failed {
		if n > 0 {
			b.WriteString("; ")
		}
		b.WriteString(id + ": " + why)
		if n++; n == 5 {
			break
		}
	}
	return b.String()
}

// Migrate moves a sandbox of a fleet to another host (host, or one the
// fleet places when ""), keeping its state, files, processes and exec
// sessions: a running one is paused durably, resumed on the new host and
// released on the old. Calls made meanwhile answer 503 (code
// sandbox_moving, with Retry-After): retry them, and re-attach exec
// streams by offset. hostd alone answers 404.
func (c *Client) Migrate(ctx context.Context, id, host string) (Sandbox, error) {
	var body []byte
	if host != "" {
		body, _ = json.Marshal(map[string]string{"host": host})
	}
	var sb Sandbox
	err := decode(c.fleetCall(ctx, http.MethodPost, "v1/sandboxes/"+url.PathEscape(id)+"/migrate", body))(http.StatusOK, &sb)
	return sb, err
}

// fleetCall makes a request to an endpoint the generated client does not
// know (the fleet's operator endpoints are not in hostd's API).
func (c *Client) fleetCall(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.raw.Server, "/")+"/"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, ed := range c.raw.RequestEditors {
		if err := ed(ctx, req); err != nil {
			return nil, err
		}
	}
	return c.raw.Client.Do(req)
}
