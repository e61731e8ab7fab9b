package client

import (
	"context"
	"net/http"
)

// Usage reports what a sandbox has consumed (CPU, memory, disk, agent
// channel bytes).
func (c *Client) Usage(ctx context.Context, id string) (Usage, error) {
	var u Usage
	err := decode(c.raw.GetUsage(ctx, id))(http.StatusOK, &u)
	return u, err
}

// ExtendTimeout makes a sandbox's timeout end timeoutS seconds from now.
func (c *Client) ExtendTimeout(ctx context.Context, id string, timeoutS int) (Sandbox, error) {
	var sb Sandbox
	err := decode(c.raw.ExtendTimeout(ctx, id, TimeoutRequest{TimeoutS: timeoutS}))(http.StatusOK, &sb)
	return sb, err
}
