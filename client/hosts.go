package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/apitypes"
)

// Hosts lists a fleet's hosts (admin; the control plane only: hostd alone
// answers 404).
func (c *Client) Hosts(ctx context.Context) ([]Host, error) {
	var list apitypes.HostList
	err := decode(c.fleetCall(ctx, http.MethodGet, "v1/hosts"))(http.StatusOK, &list)
	return list.Hosts, err
}

// SetHostAdmin cordons ("cordon": no new sandboxes), drains ("drain") or
// reactivates ("uncordon") a host of a fleet.
func (c *Client) SetHostAdmin(ctx context.Context, host, action string) (Host, error) {
	var h Host
	err := decode(c.fleetCall(ctx, http.MethodPost, "v1/hosts/"+url.PathEscape(host)+"/"+url.PathEscape(action)))(http.StatusOK, &h)
	return h, err
}

// fleetCall makes a request to an endpoint the generated client does not
// know (the fleet's operator endpoints are not in hostd's API).
func (c *Client) fleetCall(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.raw.Server, "/")+"/"+path, nil)
	if err != nil {
		return nil, err
	}
	for _, ed := range c.raw.RequestEditors {
		if err := ed(ctx, req); err != nil {
			return nil, err
		}
	}
	return c.raw.Client.Do(req)
}
