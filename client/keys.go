package client

import (
	"context"
	"net/http"
)

// CreateKey makes an API key (admin only); its secret is in the answer
// only.
func (c *Client) CreateKey(ctx context.Context, req CreateKeyRequest) (CreatedKey, error) {
	var k CreatedKey
	err := decode(c.raw.CreateKey(ctx, req))(http.StatusCreated, &k)
	return k, err
}

// ListKeys lists the live keys of the caller's project, or (admin) of
// project ("*": every project's). Never their secrets.
func (c *Client) ListKeys(ctx context.Context, project string) ([]APIKey, error) {
	var params *ListKeysParams
	if project != "" {
		params = &ListKeysParams{Project: &project}
	}
	var list KeyList
	err := decode(c.raw.ListKeys(ctx, params))(http.StatusOK, &list)
	return list.Keys, err
}

// RevokeKey revokes key id: it is refused from its next call, its open
// streams close and its share links stop working.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return decode(c.raw.RevokeKey(ctx, id))(http.StatusNoContent, nil)
}

// RotateKey makes a new bootstrap key (admin only), which hostd writes to
// its data dir's key file, and revokes the previous one.
func (c *Client) RotateKey(ctx context.Context) (CreatedKey, error) {
	var k CreatedKey
	err := decode(c.raw.RotateKey(ctx))(http.StatusCreated, &k)
	return k, err
}

// CreateProject creates a project (admin only).
func (c *Client) CreateProject(ctx context.Context, name string) (Project, error) {
	var p Project
	err := decode(c.raw.CreateProject(ctx, CreateProjectRequest{Name: name}))(http.StatusCreated, &p)
	return p, err
}

// ListProjects lists the projects (admin only).
func (c *Client) ListProjects(ctx context.Context) ([]Project, error) {
	var list ProjectList
	err := decode(c.raw.ListProjects(ctx))(http.StatusOK, &list)
	return list.Projects, err
}
