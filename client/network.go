package client

import (
	"context"
	"net/http"
)

// NetworkPolicy returns a sandbox's egress policy.
func (c *Client) NetworkPolicy(ctx context.Context, id string) (NetworkPolicy, error) {
	var p NetworkPolicy
	err := decode(c.raw.GetSandboxNetwork(ctx, id))(http.StatusOK, &p)
	return p, err
}

// PatchNetwork changes a running sandbox's egress policy: the fields set in
// patch replace the policy's, and the change applies at once.
func (c *Client) PatchNetwork(ctx context.Context, id string, patch NetworkPolicyPatch) (NetworkPolicy, error) {
	var p NetworkPolicy
	err := decode(c.raw.PatchSandboxNetwork(ctx, id, patch))(http.StatusOK, &p)
	return p, err
}

// CreateSecret stores (or replaces) a secret. Its value is never returned.
func (c *Client) CreateSecret(ctx context.Context, name, value string) (SecretInfo, error) {
	var s SecretInfo
	err := decode(c.raw.CreateSecret(ctx, CreateSecretRequest{Name: name, Value: value}))(http.StatusCreated, &s)
	return s, err
}

// ListSecrets lists the secrets' names.
func (c *Client) ListSecrets(ctx context.Context) ([]SecretInfo, error) {
	var list SecretList
	err := decode(c.raw.ListSecrets(ctx, nil))(http.StatusOK, &list)
	return list.Secrets, err
}

// DeleteSecret deletes a secret.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return decode(c.raw.DeleteSecret(ctx, name))(http.StatusNoContent, nil)
}
